#include "kpipe/io/checkpoint_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kpipe/comm/agree.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::io {

namespace {

using nlohmann::json;
using h5::Handle;

constexpr const char* manifest_name = "/manifest";
// Large datasets start on 64 KiB boundaries (whole pages and file-system blocks for each rank's writes).
constexpr hsize_t align_threshold = 64 * 1024, alignment = 64 * 1024;

hid_t file_type_of(ElementType type) {
  switch (type) {
    case ElementType::float32: return h5::file_type<float>();
    case ElementType::float64: return h5::file_type<double>();
    case ElementType::uint8: return h5::file_type<std::uint8_t>();
  }
  return -1;
}

hid_t memory_type_of(ElementType type) {
  switch (type) {
    case ElementType::float32: return h5::memory_type<float>();
    case ElementType::float64: return h5::memory_type<double>();
    case ElementType::uint8: return h5::memory_type<std::uint8_t>();
  }
  return -1;
}

bool parse_type(const std::string& text, ElementType& type) {
  for (ElementType t : {ElementType::float32, ElementType::float64, ElementType::uint8})
    if (text == to_string(t)) {
      type = t;
      return true;
    }
  return false;
}

constexpr ByteHash written_hash = hash_of_format(checkpoint_format_version);

json entry_json(const DatasetEntry& e) {
  return {{"name", e.name}, {"type", to_string(e.type)}, {"shape", e.shape}, {to_string(written_hash), hash_hex(e.hash)}};
}

// A manifest entry back (its hash under the key `kind` names); false when malformed.
bool entry_from(const json& j, DatasetEntry& e, ByteHash kind = written_hash) {
  const char* key = to_string(kind);
  if (!j.is_object() || !j.contains("name") || !j.contains("type") || !j.contains("shape") || !j.contains(key))
    return false;
  if (!j["name"].is_string() || !j["type"].is_string() || !j["shape"].is_array() || !j[key].is_string())
    return false;
  e.name = j["name"].get<std::string>();
  if (!parse_type(j["type"].get<std::string>(), e.type)) return false;
  e.shape.clear();
  for (const auto& d : j["shape"]) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return false;
    e.shape.push_back(d.get<std::int64_t>());
  }
  const std::string hex = j[key].get<std::string>();
  if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  e.hash = std::stoull(hex, nullptr, 16);
  return true;
}

// The manifest: the format, every attribute and every dataset (in name order), as JSON.
std::string manifest_text(const Attributes& attributes, const std::vector<DatasetEntry>& datasets) {
  json list = json::array();
  for (const auto& [key, value] : attributes) {
    json a = {{"object", key.first}, {"name", key.second}};
    if (const auto* number = std::get_if<std::int64_t>(&value))
      a["int"] = *number;
    else
      a["text"] = std::get<std::string>(value);
    list.push_back(a);
  }
  json entries = json::array();
  for (const auto& e : datasets) entries.push_back(entry_json(e));
  return json{{"format", checkpoint_format},
              {"format_version", checkpoint_format_version},
              {"attributes", list},
              {"datasets", entries}}
      .dump(1);
}

std::string errno_text(int error) { return std::strerror(error); }

// Writes all of [data, data + bytes) at offset; 0 or the errno.
int write_all(int fd, const char* data, std::size_t bytes, std::uint64_t offset) {
  while (bytes > 0) {
    const ssize_t done = ::pwrite(fd, data, bytes, off_t(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return errno;
    if (done == 0) return EIO;
    data += done;
    bytes -= std::size_t(done);
    offset += std::uint64_t(done);
  }
  return 0;
}

// The string type of a fixed-length text of n bytes (the manifest).
Handle text_type(std::size_t n) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<std::size_t>(n, 1));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  return type;
}

// Creates a contiguous dataset whose space is allocated now (its offset is known) and never filled; on
// failure, `why` is HDF5's reason.
Handle create_contiguous(hid_t file, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                         bool scalar, std::string& why) {
  const Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                     H5Sclose);
  const Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(create.get(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(create.get(), H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(create.get(), H5D_FILL_TIME_NEVER);
  const Handle links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(links.get(), 1);
  Handle dataset(H5Dcreate2(file, name.c_str(), type, space.get(), links.get(), create.get(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) why = h5::error_text();  // before another HDF5 call clears it
  return dataset;
}

// Creates the file and every dataset and attribute in it, on one process (rank 0). Fills offsets (per
// dataset, then the manifest's last). "" or what failed, with HDF5's reason.
std::string create_layout(const std::string& path, const std::vector<DatasetEntry>& datasets,
                          const Attributes& attributes, const std::string& manifest,
                          std::vector<std::uint64_t>& offsets) {
  const auto hdf5 = h5::exclusive();  // written beside the training, which may read tokens meanwhile
  const h5::QuietErrors quiet;
  std::string failure;
  // Called right after the HDF5 call that failed (the next call clears HDF5's record of the reason).
  auto note = [&](bool ok, const std::string& what, std::string why = "") {
    if (ok || !failure.empty()) return;
    if (why.empty()) why = h5::error_text();
    failure = why.empty() ? what : fmt::format("{}: {}", what, why);
  };
  Handle file;
  std::string why;
  {
    const Handle access = h5::file_access();
    // The HDF5 1.8 file format: checksummed object headers, readable by every HDF5 since 1.8.
    H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
    H5Pset_alignment(access.get(), align_threshold, alignment);
    file = Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), H5Fclose);
    if (!file.valid()) why = h5::error_text();
  }
  note(file.valid(), "cannot create the file", why);
  if (!file.valid()) return failure;
  offsets.assign(datasets.size() + 1, HADDR_UNDEF);
  const hid_t root = file.get();
  try {
    h5::write_attribute(root, "format", std::string(checkpoint_format));
    h5::write_attribute(root, "format_version", std::int64_t(checkpoint_format_version));
  } catch (const InputError& e) {
    note(false, e.what());
  }
  for (std::size_t i = 0; i < datasets.size(); ++i) {
    const auto& e = datasets[i];
    const std::vector<hsize_t> dims(e.shape.begin(), e.shape.end());
    const Handle dataset = create_contiguous(root, e.name, file_type_of(e.type), dims, false, why);
    note(dataset.valid(), "cannot create dataset " + e.name, why);
    if (!dataset.valid()) continue;
    try {
      h5::write_u64_attribute(dataset.get(), to_string(written_hash), e.hash);
    } catch (const InputError& error) {
      note(false, error.what());
    }
    offsets[i] = H5Dget_offset(dataset.get());
  }
  {
    const Handle type = text_type(manifest.size());
    const Handle dataset = create_contiguous(root, manifest_name, type.get(), {}, true, why);
    note(dataset.valid(), "cannot create the manifest", why);
    if (dataset.valid()) {
      try {
        h5::write_u64_attribute(dataset.get(), to_string(written_hash), xxh64(manifest));
      } catch (const InputError& error) {
        note(false, error.what());
      }
      offsets.back() = H5Dget_offset(dataset.get());
    }
  }
  for (const auto& [key, value] : attributes) {
    try {
      const Handle group = h5::require_group(root, key.first);
      if (const auto* number = std::get_if<std::int64_t>(&value))
        h5::write_attribute(group.get(), key.second, *number);
      else
        h5::write_attribute(group.get(), key.second, std::get<std::string>(value));
    } catch (const InputError& error) {
      note(false, error.what());
    }
  }
  note(H5Fclose(file.release()) >= 0, "cannot close the file (writing its metadata)");
  return failure;
}

// What each rank writes and hashes at a time: small enough to stay in cache between the two.
constexpr std::size_t write_piece = std::size_t(4) << 20;

// Rank 0, once every rank's bytes are on storage: every dataset's hash attribute and the manifest's (made
// with zeros, before the hashes were known) set to the hashes, then the manifest's bytes at `manifest_offset`,
// made durable. "" or what failed, with HDF5's reason or the errno.
std::string record_hashes(const std::string& path, const std::vector<DatasetEntry>& datasets,
                          const std::string& manifest, std::uint64_t manifest_offset) {
  {
    const auto hdf5 = h5::exclusive();  // written beside the training, which may read tokens meanwhile
    const h5::QuietErrors quiet;
    Handle file;
    {
      const Handle access = h5::file_access();
      H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
      file = Handle(H5Fopen(path.c_str(), H5F_ACC_RDWR, access.get()), H5Fclose);
    }
    if (!file.valid()) return fmt::format("cannot open to record the hashes: {}", h5::error_text());
    const auto set = [&](const std::string& name, std::uint64_t hash) {
      const Handle dataset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
      const Handle attribute(dataset.valid() ? H5Aopen(dataset.get(), to_string(written_hash), H5P_DEFAULT) : -1, H5Aclose);
      return attribute.valid() && H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &hash) >= 0;
    };
    for (const auto& e : datasets)
      if (!set(e.name, e.hash)) return fmt::format("cannot record the hash of dataset {}: {}", e.name, h5::error_text());
    if (!set(manifest_name, xxh64(manifest)))
      return fmt::format("cannot record the manifest's hash: {}", h5::error_text());
    if (H5Fclose(file.release()) < 0) return "cannot close the file (writing the hashes)";
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot open for writing the manifest: {}", errno_text(errno));
  int error = write_all(fd, manifest.data(), manifest.size(), manifest_offset);
  std::string what = "cannot write the manifest";
  if (!error && ::fsync(fd) != 0) {
    error = errno;
    what = "cannot flush to storage (fsync)";
  }
  if (::close(fd) != 0 && !error) {
    error = errno;
    what = "cannot close";
  }
  return error ? fmt::format("{}: {}", what, errno_text(error)) : "";
}

}  // namespace

const char* to_string(ElementType type) {
  switch (type) {
    case ElementType::float32: return "float32";
    case ElementType::float64: return "float64";
    case ElementType::uint8: return "uint8";
  }
  return "?";
}

std::size_t size_of(ElementType type) {
  switch (type) {
    case ElementType::float32: return 4;
    case ElementType::float64: return 8;
    case ElementType::uint8: return 1;
  }
  return 0;
}

std::int64_t DatasetEntry::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// ---- writing --------------------------------------------------------------------------------------------

CheckpointWriter::CheckpointWriter(MPI_Comm comm, double timeout_s, std::shared_ptr<const std::vector<std::string>> nodes)
    : comm_(comm), timeout_s_(timeout_s), nodes_(std::move(nodes)) {}

void CheckpointWriter::add(const std::string& name, ElementType type, const std::vector<std::int64_t>& shape,
                           const void* data) {
  if (name.empty() || name[0] != '/' || name == manifest_name)
    throw std::logic_error("kpipe::io::CheckpointWriter: dataset name '" + name + "' is not an absolute, free name");
  Local local;
  local.entry.name = name;
  local.entry.type = type;
  local.entry.shape = shape;  // its hash is computed as it is written
  local.data = data;
  local_.push_back(std::move(local));
}

void CheckpointWriter::add_tensor(const std::string& name, const std::vector<std::int64_t>& shape, const float* data) {
  add(name, ElementType::float32, shape, data);
}

void CheckpointWriter::add_tensor(const std::string& name, const std::vector<std::int64_t>& shape,
                                  const double* data) {
  add(name, ElementType::float64, shape, data);
}

void CheckpointWriter::add_blob(const std::string& name, std::string bytes) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  add(name, ElementType::uint8, {std::int64_t(owned->size())}, owned->data());
  local_.back().owned = std::move(owned);
}

void CheckpointWriter::set_attribute(const std::string& object, const std::string& name, AttributeValue value) {
  attributes_[{object, name}] = std::move(value);
}

WriteStatus CheckpointWriter::write(const std::string& path) {
  int rank = 0, size = 1, world_rank = 0;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const comm::Bound bound{timeout_s_, fmt::format("writing checkpoint file '{}'", path), nodes_};

  // 1. Everyone's declarations, in rank order: the file's layout (each rank's datasets side by side). Their
  // hashes are not known yet (each rank hashes its bytes as it writes them): the layout, whose sizes do not
  // depend on them, is made with zeros in their place.
  json mine = json::array();
  for (const auto& l : local_) mine.push_back(entry_json(l.entry));
  std::vector<int> counts;
  const std::string all = comm::allgatherv(mine.dump(), comm_, bound, &counts);
  std::vector<DatasetEntry> datasets;
  std::vector<int> owner;
  for (int r = 0, at = 0; r < size; at += counts[r], ++r) {
    for (const auto& j : json::parse(all.substr(std::size_t(at), std::size_t(counts[r])))) {
      DatasetEntry e;
      if (!entry_from(j, e)) throw std::logic_error("kpipe::io::CheckpointWriter: malformed declaration");
      datasets.push_back(std::move(e));
      owner.push_back(r);
    }
  }
  const auto manifest_of = [&] {
    std::vector<DatasetEntry> sorted = datasets;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    for (std::size_t i = 1; i < sorted.size(); ++i)
      if (sorted[i].name == sorted[i - 1].name)
        throw std::logic_error("kpipe::io::CheckpointWriter: dataset " + sorted[i].name + " given twice");
    return manifest_text(attributes_, sorted);
  };
  const std::string unhashed = manifest_of();

  // 2. The file, every dataset and attribute: created by rank 0 (metadata only: the datasets' space is
  // allocated, not written), so that a failing write there is one process's failure with its reason.
  // Creating it with parallel HDF5 instead hangs every rank in the collective close when one rank's
  // metadata write fails (a full disk): docs/checkpoint-format.md.
  std::vector<std::uint64_t> offsets(datasets.size() + 1, HADDR_UNDEF);
  comm::Failure mine_failed;
  if (rank == 0) {
    const std::string failure = create_layout(path, datasets, attributes_, unhashed, offsets);
    if (!failure.empty()) mine_failed = {1, rank, fmt::format("rank {}: '{}': {}", world_rank, path, failure)};
  }
  if (const auto failed = comm::first_failure(comm_, mine_failed, bound))
    return {false, failed.rank, failed.message, 0};
  comm::bcast(offsets.data(), int(offsets.size()), MPI_UINT64_T, 0, comm_, bound);

  // 3. Each rank writes its own datasets' bytes where HDF5 put them, hashing each piece as it goes and starting
  // its write-back (so the disk is busy while the rest is copied and hashed), then makes them durable.
  auto fail = [&](const std::string& what, int error) {
    mine_failed = {1, rank, fmt::format("rank {}: '{}': {}: {}", world_rank, path, what, errno_text(error))};
  };
  std::vector<std::uint64_t> hashes;  // of this rank's datasets, in order
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    fail("cannot open for writing", errno);
  } else {
    for (std::size_t i = 0, k = 0; i < datasets.size() && !mine_failed; ++i) {
      if (owner[i] != rank) continue;
      const auto& local = local_[k++];
      const std::size_t bytes = local.entry.bytes();
      if (bytes > 0 && offsets[i] == HADDR_UNDEF) {
        fail(fmt::format("dataset {} has no storage", datasets[i].name), EIO);
        break;
      }
      const char* data = static_cast<const char*>(local.data);
      Xxh64 hash;
      for (std::size_t done = 0; done < bytes && !mine_failed;) {
        const std::size_t piece = std::min(bytes - done, write_piece);
        hash.update(data + done, piece);
        if (const int error = write_all(fd, data + done, piece, offsets[i] + done))
          fail(fmt::format("cannot write dataset {} ({} bytes at offset {})", datasets[i].name, bytes, offsets[i]),
               error);
        else  // the disk starts on it now (Linux), so that the fsync below waits for the last pieces alone
          ::sync_file_range(fd, off_t(offsets[i] + done), off_t(piece), SYNC_FILE_RANGE_WRITE);
        done += piece;
      }
      hashes.push_back(hash.digest());
    }
    if (!mine_failed && ::fsync(fd) != 0) fail("cannot flush to storage (fsync)", errno);
    if (::close(fd) != 0 && !mine_failed) fail("cannot close", errno);
  }
  // 4. Everyone learns whether every rank's bytes are on storage, and every dataset's hash.
  if (const auto failed = comm::first_failure(comm_, mine_failed, bound)) return {false, failed.rank, failed.message, 0};
  const std::string gathered = comm::allgatherv(
      std::string(reinterpret_cast<const char*>(hashes.data()), hashes.size() * sizeof(std::uint64_t)), comm_, bound);
  if (gathered.size() != datasets.size() * sizeof(std::uint64_t))
    throw std::logic_error("kpipe::io::CheckpointWriter: a rank hashed another number of datasets");
  for (std::size_t i = 0; i < datasets.size(); ++i)
    std::memcpy(&datasets[i].hash, gathered.data() + i * sizeof(std::uint64_t), sizeof(std::uint64_t));
  const std::string manifest = manifest_of();
  if (manifest.size() != unhashed.size())
    throw std::logic_error("kpipe::io::CheckpointWriter: the manifest's size depends on the hashes");

  // 5. Rank 0 records the hashes in the file: each dataset's attribute, the manifest and its own hash.
  if (rank == 0) {
    const std::string failure = record_hashes(path, datasets, manifest, offsets.back());
    if (!failure.empty()) mine_failed = {1, rank, fmt::format("rank {}: '{}': {}", world_rank, path, failure)};
  }
  if (const auto failed = comm::first_failure(comm_, mine_failed, bound)) return {false, failed.rank, failed.message, 0};
  WriteStatus status;
  status.manifest_hash = xxh64(manifest);
  return status;
}

// ---- reading --------------------------------------------------------------------------------------------

namespace {

template <class... Args> [[noreturn]] void corrupt(fmt::format_string<Args...> format, Args&&... args) {
  throw CorruptCheckpoint(fmt::format(format, std::forward<Args>(args)...));
}

// Two values of one attribute that differ, on one line, where they differ: a number as it is; a text by its
// first line that differs, and for the run's TOML configuration the key ("the file reads model.ln_eps = 2e-05,
// the checksummed manifest says 1e-05"), so that a change deep in a long text is seen at once.
std::string difference_text(const AttributeValue& shown, const AttributeValue& recorded) {
  const auto* shown_text = std::get_if<std::string>(&shown);
  const auto* recorded_text = std::get_if<std::string>(&recorded);
  if (!shown_text || !recorded_text) {
    const auto text = [](const AttributeValue& v) {
      if (const auto* number = std::get_if<std::int64_t>(&v)) return std::to_string(*number);
      return fmt::format("a text of {} bytes", std::get<std::string>(v).size());
    };
    return fmt::format("reads {} but the checksummed manifest says {}", text(shown), text(recorded));
  }
  std::istringstream a(*shown_text), b(*recorded_text);
  std::string table, line_a, line_b;
  for (int line = 1;; ++line) {
    const bool more_a = bool(std::getline(a, line_a)), more_b = bool(std::getline(b, line_b));
    if (!more_a && !more_b) return "differs from the checksummed manifest's copy";
    if (more_a && more_b && line_a == line_b) {
      if (line_a.size() > 2 && line_a.front() == '[' && line_a.back() == ']')
        table = line_a.substr(1, line_a.size() - 2);
      continue;
    }
    const auto key_of = [](const std::string& l) { return l.substr(0, l.find(" = ")); };
    const auto value_of = [](const std::string& l) {
      const auto at = l.find(" = ");
      return at == std::string::npos ? l : l.substr(at + 3);
    };
    if (more_a && more_b && line_a.find(" = ") != std::string::npos && key_of(line_a) == key_of(line_b))
      return fmt::format("reads {}{} = {} but the checksummed manifest says {}", table.empty() ? "" : table + ".",
                         key_of(line_a), value_of(line_a), value_of(line_b));
    return fmt::format("differs from the checksummed manifest's copy at line {}: '{}' there, '{}' here", line,
                       more_b ? line_b : "(end)", more_a ? line_a : "(end)");
  }
}

// The file says it is a kpipe checkpoint of a format this kpipe reads; returns its format_version.
int check_format(hid_t root, const std::string& path) {
  std::string format;
  try {
    format = h5::read_string_attribute(root, "format", path);
  } catch (const InputError&) {
  }
  if (format != checkpoint_format)
    corrupt("checkpoint file '{}': not a kpipe checkpoint (attribute format = '{}')", path, format);
  std::int64_t version = -1;
  try {
    version = h5::read_int_attribute(root, "format_version", path);
  } catch (const InputError&) {
    corrupt("checkpoint file '{}': no readable format_version attribute", path);
  }
  require(version != 1,
          "checkpoint file '{}': format_version 1 (per-rank files linked from checkpoint.h5, written by an earlier "
          "kpipe) is not read by this kpipe, which reads format_version {}: its metadata carries no checksum",
          path, checkpoint_format_version);
  require(version >= oldest_read_format_version && version <= checkpoint_format_version,
          "checkpoint file '{}': format_version {} is not read by this kpipe, which reads format_version {} to {}",
          path, version, oldest_read_format_version, checkpoint_format_version);
  return int(version);
}

// The manifest of a file of format_version `version`, checked against its own hash (returned in `hash`), and
// its shape.
json read_manifest(hid_t root, const std::string& path, int version, std::uint64_t& hash) {
  const ByteHash kind = hash_of_format(version);
  const Handle dataset(H5Dopen2(root, manifest_name, H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) corrupt("checkpoint file '{}': no readable /manifest ({})", path, h5::error_text());
  const Handle type(H5Dget_type(dataset.get()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
    corrupt("checkpoint file '{}': /manifest is not a text", path);
  std::string text(H5Tget_size(type.get()), '\0');
  if (H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
    corrupt("checkpoint file '{}': /manifest cannot be read (truncated or damaged file)", path);
  std::uint64_t stored = 0;
  try {
    stored = h5::read_u64_attribute(dataset.get(), to_string(kind), path);
  } catch (const InputError&) {
    corrupt("checkpoint file '{}': /manifest has no readable {} attribute", path, to_string(kind));
  }
  hash = hash_bytes(kind, text);
  while (!text.empty() && text.back() == '\0') text.pop_back();  // NULPAD of a zero-length text
  if (hash != stored)
    corrupt("checkpoint file '{}': /manifest fails its checksum ({} stored {}, computed {})", path, to_string(kind),
            hash_hex(stored), hash_hex(hash));
  const json manifest = json::parse(text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || manifest.value("format", "") != checkpoint_format ||
      manifest.value("format_version", -1) != version || !manifest.contains("attributes") ||
      !manifest["attributes"].is_array() || !manifest.contains("datasets") || !manifest["datasets"].is_array())
    corrupt("checkpoint file '{}': /manifest is not a kpipe checkpoint manifest", path);
  return manifest;
}

// The attributes the manifest lists, each checked against what HDF5 tools show.
Attributes verified_attributes(hid_t root, const json& manifest, const std::string& path) {
  Attributes attributes;
  for (const auto& a : manifest["attributes"]) {
    if (!a.is_object() || !a.contains("object") || !a.contains("name") || !a["object"].is_string() ||
        !a["name"].is_string() || !(a.contains("int") ? a["int"].is_number_integer() : a.value("text", json()).is_string()))
      corrupt("checkpoint file '{}': /manifest lists a malformed attribute", path);
    const std::string object = a["object"].get<std::string>(), name = a["name"].get<std::string>();
    AttributeValue value;
    if (a.contains("int"))
      value = a["int"].get<std::int64_t>();
    else
      value = a["text"].get<std::string>();
    // What HDF5 tools show must be what the manifest says.
    AttributeValue shown;
    try {
      const Handle group = h5::open_group(root, object);
      if (std::holds_alternative<std::int64_t>(value))
        shown = h5::read_int_attribute(group.get(), name, path);
      else
        shown = h5::read_string_attribute(group.get(), name, path);
    } catch (const InputError&) {
      corrupt("checkpoint file '{}': attribute {} of {} cannot be read (damaged file)", path, name, object);
    }
    if (shown != value)
      corrupt("checkpoint file '{}': attribute {} of {} {}", path, name, object, difference_text(shown, value));
    attributes[{object, name}] = std::move(value);
  }
  return attributes;
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  try {
    file_ = h5::open_file(path);
  } catch (const InputError& e) {
    throw CorruptCheckpoint(fmt::format("checkpoint file {}", e.what()));
  }
  const h5::QuietErrors quiet;
  const hid_t root = file_.get();
  format_version_ = check_format(root, path);
  // The manifest, checked against its own hash; then everything else against the manifest.
  const json manifest = read_manifest(root, path, format_version_, manifest_hash_);
  attributes_ = verified_attributes(root, manifest, path);
  for (const auto& j : manifest["datasets"]) {
    DatasetEntry e;
    if (!entry_from(j, e, hash_kind())) corrupt("checkpoint file '{}': /manifest lists a malformed dataset", path);
    datasets_.push_back(std::move(e));
  }
}

bool CheckpointReader::has(const std::string& object, const std::string& name) const {
  return attributes_.count({object, name}) > 0;
}

std::int64_t CheckpointReader::number(const std::string& name, const std::string& object) const {
  const auto it = attributes_.find({object, name});
  if (it == attributes_.end() || !std::holds_alternative<std::int64_t>(it->second))
    corrupt("checkpoint file '{}': no integer attribute {} of {}", path_, name, object);
  return std::get<std::int64_t>(it->second);
}

std::string CheckpointReader::text(const std::string& name, const std::string& object) const {
  const auto it = attributes_.find({object, name});
  if (it == attributes_.end() || !std::holds_alternative<std::string>(it->second))
    corrupt("checkpoint file '{}': no text attribute {} of {}", path_, name, object);
  return std::get<std::string>(it->second);
}

const DatasetEntry* CheckpointReader::find(const std::string& name) const {
  const auto it = std::lower_bound(datasets_.begin(), datasets_.end(), name,
                                   [](const DatasetEntry& e, const std::string& n) { return e.name < n; });
  return it != datasets_.end() && it->name == name ? &*it : nullptr;
}

std::string CheckpointReader::read_verified(const DatasetEntry& entry) const {
  std::string bytes(entry.bytes(), '\0');
  read_checked(entry, bytes.data());
  return bytes;
}

void CheckpointReader::read_checked(const DatasetEntry& entry, void* dest) const {
  const h5::QuietErrors quiet;
  const Handle dataset(H5Dopen2(file_.get(), entry.name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid())
    corrupt("checkpoint file '{}': dataset {} cannot be opened (truncated or damaged file)", path_, entry.name);
  const Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(std::size_t(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  const std::vector<std::int64_t> shape(dims.begin(), dims.end());
  if (!type.valid() || H5Tequal(type.get(), file_type_of(entry.type)) <= 0 || shape != entry.shape)
    corrupt("checkpoint file '{}': dataset {} is not the {} {} the manifest lists", path_, entry.name,
            to_string(entry.type), shape_text(entry.shape));
  const std::string_view bytes(static_cast<const char*>(dest), entry.bytes());
  if (!bytes.empty() && H5Dread(dataset.get(), memory_type_of(entry.type), H5S_ALL, H5S_ALL, H5P_DEFAULT, dest) < 0)
    corrupt("checkpoint file '{}': dataset {} cannot be read (truncated or damaged file)", path_, entry.name);
  const ByteHash kind = hash_kind();
  const std::uint64_t got = hash_bytes(kind, bytes);
  if (got != entry.hash) {
    std::uint64_t own = 0;
    try {
      own = h5::read_u64_attribute(dataset.get(), to_string(kind), path_);
    } catch (const InputError&) {
    }
    if (own == got)
      corrupt("checkpoint file '{}': dataset {} is not this checkpoint's: its bytes match its own {} attribute "
              "({}) but the manifest records {} (copied in from another checkpoint?)",
              path_, entry.name, to_string(kind), hash_hex(own), hash_hex(entry.hash));
    corrupt("checkpoint file '{}': dataset {} fails its checksum ({} in the manifest {}, computed {})", path_,
            entry.name, to_string(kind), hash_hex(entry.hash), hash_hex(got));
  }
}

template <class T>
void CheckpointReader::read_tensor(const std::string& name, const std::vector<std::int64_t>& shape, T* dest) const {
  const DatasetEntry* entry = find(name);
  require(entry != nullptr, "checkpoint '{}': the model's tensor {} (shape {}) is not in the checkpoint", path_, name,
          shape_text(shape));
  require(entry->shape == shape, "checkpoint '{}': tensor {} has shape {} in the checkpoint, {} in the model", path_,
          name, shape_text(entry->shape), shape_text(shape));
  require(entry->type == ElementType::float32 || entry->type == ElementType::float64,
          "checkpoint '{}': dataset {} is {}, not a float32 or float64 tensor", path_, name, to_string(entry->type));
  if (size_of(entry->type) == sizeof(T)) {  // straight into dest: no pass over the bytes but the read and the hash
    read_checked(*entry, dest);
    return;
  }
  const std::size_t n = std::size_t(entry->numel());
  std::string bytes = read_verified(*entry);
  bytes.resize(n * std::max(sizeof(T), size_of(entry->type)));
  H5Tconvert(memory_type_of(entry->type), h5::memory_type<T>(), n, bytes.data(), nullptr, H5P_DEFAULT);
  std::memcpy(dest, bytes.data(), n * sizeof(T));
}

std::string CheckpointReader::read_blob(const std::string& name) const {
  const DatasetEntry* entry = find(name);
  require(entry != nullptr, "checkpoint '{}': no blob {}", path_, name);
  require(entry->type == ElementType::uint8 && entry->shape.size() == 1, "checkpoint '{}': dataset {} is not a blob",
          path_, name);
  return read_verified(*entry);
}

#define KPIPE_INSTANTIATE(T)                                                                                          \
  template void CheckpointReader::read_tensor(const std::string&, const std::vector<std::int64_t>&, T*) const;
KPIPE_TRAINING_ACCUMULATIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io
