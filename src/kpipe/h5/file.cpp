#include "kpipe/h5/file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/h5/stored_chunks.hpp"

namespace kpipe::h5 {

std::unique_lock<std::mutex> exclusive() {
  static std::mutex library;
  return std::unique_lock<std::mutex>(library);
}

namespace {

// Roughly this many bytes per chunk: small enough for a step's rows, large enough to compress well.
constexpr hsize_t target_chunk_bytes = 64 * 1024;

std::string object_name(hid_t location) {
  const ssize_t size = H5Iget_name(location, nullptr, 0);
  if (size <= 0) return "?";
  std::string name(std::size_t(size) + 1, '\0');
  H5Iget_name(location, name.data(), name.size());
  name.resize(std::size_t(size));
  return name;
}

std::string file_name(hid_t location) {
  const ssize_t size = H5Fget_name(location, nullptr, 0);
  if (size <= 0) return "?";
  std::string name(std::size_t(size) + 1, '\0');
  H5Fget_name(location, name.data(), name.size());
  name.resize(std::size_t(size));
  return name;
}

// "file.h5:/group/name" for messages.
std::string where(hid_t location, const std::string& name) {
  std::string base = object_name(location);
  if (base.empty() || base.back() != '/') base += '/';
  return fmt::format("{}:{}{}", file_name(location), base, name);
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : path) {
    if (c == '/') {
      if (!part.empty()) parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  if (!part.empty()) parts.push_back(part);
  return parts;
}

// Every chunked dataset kpipe writes: h5/stored_chunks.hpp's filters (a damaged chunk is an error, never data).
void set_chunk_filters(hid_t properties) { ChunkFilters::of_this_build().set_on(properties); }

}  // namespace

Handle create_extendible(hid_t location, const std::string& name, hid_t file_type, const std::vector<hsize_t>& row_shape) {
  std::vector<hsize_t> dims{0}, max_dims{H5S_UNLIMITED}, chunk{1};
  hsize_t row_elements = 1;
  for (hsize_t d : row_shape) {
    dims.push_back(d);
    max_dims.push_back(d);
    chunk.push_back(std::max<hsize_t>(d, 1));
    row_elements *= std::max<hsize_t>(d, 1);
  }
  const hsize_t row_bytes = row_elements * H5Tget_size(file_type);
  chunk[0] = std::clamp<hsize_t>(target_chunk_bytes / std::max<hsize_t>(row_bytes, 1), 1, 1 << 16);
  const Handle space(H5Screate_simple(int(dims.size()), dims.data(), max_dims.data()), H5Sclose);
  const Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(properties.get(), int(chunk.size()), chunk.data());
  set_chunk_filters(properties.get());
  Handle dataset(H5Dcreate2(location, name.c_str(), file_type, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT),
                 H5Dclose);
  require(dataset.valid(), "{}: cannot create dataset", where(location, name));
  return dataset;
}

namespace {

template <class V>
std::vector<V> read_all(hid_t location, const std::string& name, hid_t memory_type, const std::string& label) {
  const Handle dataset = open_dataset(location, name, label);
  const Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  require(count >= 0, "{}: cannot read the shape of '{}'", label, name);
  std::vector<V> values(static_cast<std::size_t>(count));
  QuietErrors quiet;
  if (count > 0)
    require(H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0,
            "{}: cannot read dataset '{}' (corrupt, or not numeric)", label, name);
  return values;
}

hsize_t row_count(std::size_t values, const std::vector<hsize_t>& row_shape) {
  hsize_t per_row = 1;
  for (hsize_t d : row_shape) per_row *= d;
  return per_row == 0 ? 0 : hsize_t(values) / per_row;
}

}  // namespace

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &function_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, function_, data_); }

std::string error_text() {
  std::string text;
  auto innermost = [](unsigned, const H5E_error2_t* error, void* data) -> herr_t {
    auto& text = *static_cast<std::string*>(data);
    if (text.empty() && error->desc && *error->desc) text = error->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &text);  // upward: the innermost first
  // The file drivers' messages carry the system's reason ("file write failed: time = ..., errno = 28,
  // error message = 'No space left on device', ..."): keep what failed and why, on one line.
  const std::string marker = "error message = '";
  if (const auto at = text.find(marker); at != std::string::npos) {
    const auto end = text.find('\'', at + marker.size());
    const std::string reason = text.substr(at + marker.size(), end == std::string::npos ? end : end - at - marker.size());
    text = text.substr(0, text.find(':')) + ": " + reason;
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

void start_for_program() {
  H5dont_atexit();  // before the library starts, or it has registered its exit handler
  H5open();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Handle file_access() {
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(access.get(), false, true);
#endif
  return access;
}

Handle create_file(const std::string& path) {
  require_writable(path, path);
  QuietErrors quiet;
  errno = 0;
  const Handle access = file_access();  // closed after the reason is read: a successful close clears it
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), H5Fclose);
  require(file.valid(), "{}: cannot create HDF5 file ({})", path, errno ? std::strerror(errno) : error_text());
  return file;
}

namespace {

Handle open_read_only(const std::string& path, hid_t access) {
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("{}: cannot open ({})", path, reason));
  QuietErrors quiet;
  require(H5Fis_hdf5(path.c_str()) > 0, "{}: not an HDF5 file", path);
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access), H5Fclose);
  require(file.valid(), "{}: cannot open HDF5 file ({})", path, error_text());
  return file;
}

}  // namespace

Handle open_file(const std::string& path) {
  const Handle access = file_access();  // closed after the reason is read: a successful close clears it
  return open_read_only(path, access.get());
}

Handle open_file_with_fixed_cache(const std::string& path, std::size_t metadata_cache_bytes) {
  const Handle access = file_access();
  H5AC_cache_config_t cache{};
  cache.version = H5AC__CURR_CACHE_CONFIG_VERSION;
  H5Pget_mdc_config(access.get(), &cache);
  // One size, never grown nor shrunk by HDF5's adaptive resizing.
  cache.set_initial_size = true;
  cache.initial_size = cache.min_size = cache.max_size = metadata_cache_bytes;
  cache.incr_mode = H5C_incr__off;
  cache.flash_incr_mode = H5C_flash_incr__off;
  cache.decr_mode = H5C_decr__off;
  H5Pset_mdc_config(access.get(), &cache);
  return open_read_only(path, access.get());
}

Handle open_dataset(hid_t location, const std::string& name, const std::string& label) {
  QuietErrors quiet;
  require(exists(location, name), "{}: no dataset '{}'", label, name);
  Handle dataset(H5Dopen2(location, name.c_str(), H5P_DEFAULT), H5Dclose);
  require(dataset.valid(), "{}: '{}' is not a dataset", label, name);
  return dataset;
}

bool is_hdf5_file(const std::string& path) {
  QuietErrors quiet;
  return unreadable_reason(path).empty() && H5Fis_hdf5(path.c_str()) > 0;
}

bool exists(hid_t location, const std::string& path) {
  QuietErrors quiet;
  std::string prefix;
  for (const std::string& part : split_path(path)) {
    prefix += (prefix.empty() ? "" : "/") + part;
    if (H5Lexists(location, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return !prefix.empty();
}

Handle open_group(hid_t location, const std::string& path) {
  QuietErrors quiet;
  Handle group(H5Gopen2(location, path.c_str(), H5P_DEFAULT), H5Gclose);
  require(group.valid(), "{}: no group", where(location, path));
  return group;
}

Handle require_group(hid_t location, const std::string& path) {
  std::string prefix;
  for (const std::string& part : split_path(path)) {
    prefix += (prefix.empty() ? "" : "/") + part;
    if (!exists(location, prefix)) {
      const Handle created(H5Gcreate2(location, prefix.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      require(created.valid(), "{}: cannot create group", where(location, prefix));
    }
  }
  return open_group(location, path);
}

std::vector<std::string> children(hid_t group) {
  H5G_info_t info;
  std::vector<std::string> names;
  if (H5Gget_info(group, &info) < 0) return names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (size < 0) continue;
    std::string name(std::size_t(size) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(std::size_t(size));
    names.push_back(name);
  }
  return names;
}

bool deflate_available() {
  if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0) return false;
  unsigned int config = 0;
  if (H5Zget_filter_info(H5Z_FILTER_DEFLATE, &config) < 0) return false;
  return (config & H5Z_FILTER_CONFIG_ENCODE_ENABLED) != 0;
}

void append(hid_t location, const std::string& name, hid_t file_type, hid_t memory_type, const void* data,
            hsize_t rows, const std::vector<hsize_t>& row_shape) {
  Handle dataset;
  if (exists(location, name)) {
    dataset = Handle(H5Dopen2(location, name.c_str(), H5P_DEFAULT), H5Dclose);
  } else {
    dataset = create_extendible(location, name, file_type, row_shape);
  }
  require(dataset.valid(), "{}: cannot open dataset", where(location, name));
  std::vector<hsize_t> dims(row_shape.size() + 1);
  {
    const Handle space(H5Dget_space(dataset.get()), H5Sclose);
    require(H5Sget_simple_extent_ndims(space.get()) == int(dims.size()), "{}: rank differs from the rows appended",
            where(location, name));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  }
  for (std::size_t k = 0; k < row_shape.size(); ++k)
    require(dims[k + 1] == row_shape[k], "{}: row shape differs from the rows appended", where(location, name));
  if (rows == 0) return;
  const hsize_t first = dims[0];
  dims[0] += rows;
  require(H5Dset_extent(dataset.get(), dims.data()) >= 0, "{}: cannot extend", where(location, name));
  const Handle file_space(H5Dget_space(dataset.get()), H5Sclose);
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = first;
  count[0] = rows;
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  const Handle memory_space(H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose);
  require(H5Dwrite(dataset.get(), memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data) >= 0,
          "{}: cannot write rows", where(location, name));
}

void append(hid_t location, const std::string& name, const std::vector<double>& values,
            const std::vector<hsize_t>& row_shape) {
  append(location, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data(), row_count(values.size(), row_shape),
         row_shape);
}

void append(hid_t location, const std::string& name, const std::vector<std::int64_t>& values,
            const std::vector<hsize_t>& row_shape) {
  append(location, name, H5T_STD_I64LE, H5T_NATIVE_INT64, values.data(), row_count(values.size(), row_shape),
         row_shape);
}

void append(hid_t location, const std::string& name, const std::vector<std::int32_t>& values,
            const std::vector<hsize_t>& row_shape) {
  append(location, name, H5T_STD_I32LE, H5T_NATIVE_INT32, values.data(), row_count(values.size(), row_shape),
         row_shape);
}

void append(hid_t location, const std::string& name, const std::vector<float>& values,
            const std::vector<hsize_t>& row_shape) {
  append(location, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, values.data(), row_count(values.size(), row_shape),
         row_shape);
}

void write_dataset(hid_t location, const std::string& name, hid_t file_type, hid_t memory_type, const void* data,
                   const std::vector<hsize_t>& dims, bool compress) {
  QuietErrors quiet;
  hsize_t elements = 1;
  for (hsize_t d : dims) elements *= d;
  const Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  const Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (compress && elements > 0) {
    // Whole rows of the trailing dimensions, about target_chunk_bytes per chunk (never beyond the dataset).
    std::vector<hsize_t> chunk = dims;
    hsize_t row_bytes = H5Tget_size(file_type);
    for (std::size_t k = 1; k < dims.size(); ++k) row_bytes *= dims[k];
    chunk[0] = std::clamp<hsize_t>(target_chunk_bytes / std::max<hsize_t>(row_bytes, 1), 1, dims[0]);
    H5Pset_chunk(properties.get(), int(chunk.size()), chunk.data());
    set_chunk_filters(properties.get());
  }
  const Handle links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(links.get(), 1);
  const Handle dataset(
      H5Dcreate2(location, name.c_str(), file_type, space.get(), links.get(), properties.get(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) throw InputError(fmt::format("{}: cannot create dataset ({})", where(location, name), error_text()));
  if (elements > 0 && H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw InputError(fmt::format("{}: cannot write dataset ({})", where(location, name), error_text()));
}

void write_bytes(hid_t location, const std::string& name, const std::string& bytes) {
  write_dataset(location, name, file_type<std::uint8_t>(), memory_type<std::uint8_t>(), bytes.data(),
                {hsize_t(bytes.size())});
}

std::vector<hsize_t> shape(hid_t location, const std::string& name) {
  const Handle dataset = open_dataset(location, name, where(location, name));
  const Handle space(H5Dget_space(dataset.get()), H5Sclose);
  std::vector<hsize_t> dims(std::max(H5Sget_simple_extent_ndims(space.get()), 0));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::vector<double> read_doubles(hid_t location, const std::string& name, const std::string& label) {
  return read_all<double>(location, name, H5T_NATIVE_DOUBLE, label);
}

std::vector<std::int64_t> read_int64s(hid_t location, const std::string& name, const std::string& label) {
  return read_all<std::int64_t>(location, name, H5T_NATIVE_INT64, label);
}

std::vector<std::int32_t> read_int32s(hid_t location, const std::string& name, const std::string& label) {
  return read_all<std::int32_t>(location, name, H5T_NATIVE_INT32, label);
}

std::string read_bytes(hid_t location, const std::string& name, const std::string& label) {
  const std::vector<std::uint8_t> values = read_all<std::uint8_t>(location, name, H5T_NATIVE_UINT8, label);
  return std::string(values.begin(), values.end());
}

hsize_t chunk_length(hid_t dataset) {
  const Handle properties(H5Dget_create_plist(dataset), H5Pclose);
  if (!properties.valid() || H5Pget_layout(properties.get()) != H5D_CHUNKED) return 0;
  hsize_t chunk[H5S_MAX_RANK] = {};
  return H5Pget_chunk(properties.get(), H5S_MAX_RANK, chunk) >= 1 ? chunk[0] : 0;
}

WrittenStorage written_storage(hid_t dataset) {
  const Handle space(H5Dget_space(dataset), H5Sclose);
  const hssize_t elements = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  if (elements <= 0) return {};
  if (const hsize_t length = chunk_length(dataset); length > 0) {
    // Chunks along the first dimension (kpipe's chunked datasets are chunked along it alone).
    std::vector<hsize_t> dims(std::size_t(std::max(H5Sget_simple_extent_ndims(space.get()), 1)));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    const hsize_t spanned = (dims[0] + length - 1) / length;
#if H5_VERSION_GE(1, 10, 5)
    hsize_t written = 0;
    if (H5Dget_num_chunks(dataset, space.get(), &written) < 0) written = 0;  // HDF5 1.10 refuses H5S_ALL
    return {spanned, written};
#else
    return {spanned, spanned};  // this HDF5 cannot count them
#endif
  }
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  H5Dget_space_status(dataset, &status);
  return {1, status == H5D_SPACE_STATUS_ALLOCATED ? hsize_t(1) : hsize_t(0)};
}

namespace {

// Elements [first, first + count) of a 1-D dataset: nullopt, or HDF5's reason for the failure (taken before
// the handles close: a successful call clears HDF5's error stack).
std::optional<std::string> read_selection(hid_t dataset, hid_t memory_type, hsize_t first, hsize_t count, void* out) {
  const Handle file_space(H5Dget_space(dataset), H5Sclose);
  if (!file_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &first, nullptr, &count, nullptr) < 0)
    return error_text();
  const Handle memory_space(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (!memory_space.valid() || H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, out) < 0)
    return error_text();
  return std::nullopt;
}

hsize_t extent_1d(hid_t dataset) {
  const Handle space(H5Dget_space(dataset), H5Sclose);
  const hssize_t points = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  return points > 0 ? hsize_t(points) : 0;
}

}  // namespace

std::optional<ReadFailure> read_range(hid_t dataset, hid_t memory_type, hsize_t first, hsize_t count, void* out) {
  if (count == 0) return std::nullopt;
  const QuietErrors quiet;
  const std::optional<std::string> reason = read_selection(dataset, memory_type, first, count, out);
  if (!reason) return std::nullopt;
  ReadFailure failure;
  failure.reason = *reason;
  const hsize_t chunk = chunk_length(dataset);
  if (chunk == 0) return failure;
  // Which chunk: each one the range touches, read alone (a window spans at most two).
  const hsize_t size = extent_1d(dataset);
  std::vector<unsigned char> scratch(std::size_t(chunk) * std::max<std::size_t>(H5Tget_size(memory_type), 1));
  for (hsize_t k = first / chunk; k <= (first + count - 1) / chunk && k * chunk < size; ++k) {
    const hsize_t begin = k * chunk, length = std::min(chunk, size - begin);
    const std::optional<std::string> chunk_reason = read_selection(dataset, memory_type, begin, length, scratch.data());
    if (!chunk_reason) continue;
    failure.reason = *chunk_reason;
    failure.chunk = ChunkPosition{k, (size + chunk - 1) / chunk, begin, begin + length};
    break;
  }
  return failure;
}

H5T_class_t type_class(hid_t location, const std::string& name, const std::string& label) {
  const Handle dataset = open_dataset(location, name, label);
  const Handle type(H5Dget_type(dataset.get()), H5Tclose);
  return type.valid() ? H5Tget_class(type.get()) : H5T_NO_CLASS;
}

void close_file(Handle& file, const std::string& label) {
  QuietErrors quiet;
  const hid_t id = file.release();
  if (H5Fflush(id, H5F_SCOPE_GLOBAL) < 0) {
    const std::string why = error_text();
    H5Fclose(id);
    throw InputError(fmt::format("{}: cannot write ({})", label, why));
  }
  if (H5Fclose(id) < 0) throw InputError(fmt::format("{}: cannot write ({})", label, error_text()));
}

void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  const Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<std::size_t>(value.size(), 1));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  require(attribute.valid() && H5Awrite(attribute.get(), type.get(), padded.data()) >= 0,
          "{}: cannot write attribute '{}'", object_name(object), name);
}

void write_attribute(hid_t object, const std::string& name, std::int64_t value) {
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         H5Aclose);
  require(attribute.valid() && H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value) >= 0,
          "{}: cannot write attribute '{}'", object_name(object), name);
}

void write_u64_attribute(hid_t object, const std::string& name, std::uint64_t value) {
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name.c_str(), H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         H5Aclose);
  require(attribute.valid() && H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &value) >= 0,
          "{}: cannot write attribute '{}'", object_name(object), name);
}

bool has_attribute(hid_t object, const std::string& name) {
  QuietErrors quiet;
  return H5Aexists(object, name.c_str()) > 0;
}

void write_format(hid_t root, const std::string& format, std::int64_t version) {
  write_attribute(root, "format", format);
  write_attribute(root, "format_version", version);
}

bool has_format(hid_t root, const std::string& format, const std::string& label) {
  return has_attribute(root, "format") && read_string_attribute(root, "format", label) == format;
}

std::string read_string_attribute(hid_t object, const std::string& name, const std::string& label) {
  QuietErrors quiet;
  require(has_attribute(object, name), "{}: no attribute '{}'", label, name);
  const Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose);
  const Handle type(H5Aget_type(attribute.get()), H5Tclose);
  require(H5Tget_class(type.get()) == H5T_STRING, "{}: attribute '{}' is not a string", label, name);
  if (H5Tis_variable_str(type.get()) > 0) {
    const Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memory.get(), H5T_VARIABLE);
    char* text = nullptr;
    require(H5Aread(attribute.get(), memory.get(), &text) >= 0, "{}: cannot read attribute '{}'", label, name);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  require(H5Aread(attribute.get(), type.get(), value.data()) >= 0, "{}: cannot read attribute '{}'", label, name);
  value.resize(std::strlen(value.c_str()));
  return value;
}

namespace {

template <class T> T read_integer_attribute(hid_t object, const std::string& name, const std::string& label) {
  QuietErrors quiet;
  require(has_attribute(object, name), "{}: no attribute '{}'", label, name);
  const Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose);
  T value = 0;
  require(H5Aread(attribute.get(), memory_type<T>(), &value) >= 0, "{}: attribute '{}' is not an integer", label,
          name);
  return value;
}

}  // namespace

std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& label) {
  return read_integer_attribute<std::int64_t>(object, name, label);
}

std::uint64_t read_u64_attribute(hid_t object, const std::string& name, const std::string& label) {
  return read_integer_attribute<std::uint64_t>(object, name, label);
}

}  // namespace kpipe::h5
