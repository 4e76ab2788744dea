#include "kpipe/io/checkpoint.hpp"

#include <fmt/format.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <thread>

#include "kpipe/core/config_io.hpp"
#include "kpipe/model/parameters.hpp"
#include "kpipe/version.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/io/h5_file.hpp"
#include "kpipe/io/tokenizer_store.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

namespace {

// The three flat buffers a checkpoint holds per tensor, and where each lives in the HDF5 tree.
constexpr const char* model_root = "/model/";
constexpr const char* moment1_root = "/optimizer/moment1/";
constexpr const char* moment2_root = "/optimizer/moment2/";
constexpr hsize_t chunk_bytes = 1 << 20;  // HDF5 chunk size bound (Fletcher32 needs a chunked layout)

// HDF5 handles that close themselves, and silence for HDF5's own error printing (io/h5_file.hpp).
using Handle = io::h5::Handle;
using QuietHdf5Errors = io::h5::QuietErrors;

// Write failures are the file system's (full, read-only, gone): an InputError naming the file.
void check_write(herr_t status, const std::string& file, const std::string& what) {
  require(status >= 0, "checkpoint file '{}': cannot write {}", file, what);
}

void write_string_attribute(hid_t object, const char* name, const std::string& value, const std::string& file) {
  const Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<std::size_t>(value.size(), 1));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check_write(attribute.valid() ? H5Awrite(attribute.get(), type.get(), value.c_str()) : -1, file,
              fmt::format("attribute {}", name));
}

void write_int_attribute(hid_t object, const char* name, std::int64_t value, const std::string& file) {
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check_write(attribute.valid() ? H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value) : -1, file,
              fmt::format("attribute {}", name));
}

void write_u64_attribute(hid_t object, const char* name, std::uint64_t value, const std::string& file) {
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check_write(attribute.valid() ? H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &value) : -1, file,
              fmt::format("attribute {}", name));
}

bool read_string_attribute(hid_t object, const char* name, std::string& value) {
  if (H5Aexists(object, name) <= 0) return false;
  const Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  const Handle type(H5Aget_type(attribute.get()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return false;
  std::string buffer(H5Tget_size(type.get()), '\0');
  if (H5Aread(attribute.get(), type.get(), buffer.data()) < 0) return false;
  buffer.resize(std::strlen(buffer.c_str()));
  value = buffer;
  return true;
}

bool read_int_attribute(hid_t object, const char* name, std::int64_t& value) {
  if (H5Aexists(object, name) <= 0) return false;
  const Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  return attribute.valid() && H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) >= 0;
}

bool read_u64_attribute(hid_t object, const char* name, std::uint64_t& value) {
  if (H5Aexists(object, name) <= 0) return false;
  const Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  return attribute.valid() && H5Aread(attribute.get(), H5T_NATIVE_UINT64, &value) >= 0;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string rank_file_name(int stage) { return fmt::format("rank-{}.h5", stage); }

// ---- agreement among ranks ----------------------------------------------------------------------------

enum class Failure : int { none = 0, corrupt = 1, input = 2 };

// Runs fn on this rank, then every rank of world learns whether any failed and the message of the
// lowest failing rank; all throw the same error. Doubles as a barrier.
void collectively(MPI_Comm world, const std::function<void()>& fn) {
  Failure failure = Failure::none;
  std::string message;
  try {
    fn();
  } catch (const CorruptCheckpoint& e) {
    failure = Failure::corrupt;
    message = e.what();
  } catch (const InputError& e) {
    failure = Failure::input;
    message = e.what();
  } catch (const std::exception& e) {  // file-system errors: the checkpoint directory is unusable
    failure = Failure::input;
    message = fmt::format("checkpoint: {}", e.what());
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  int first = failure == Failure::none ? size : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, world);
  if (first == size) return;
  int header[2] = {int(failure), int(message.size())};
  MPI_Bcast(header, 2, MPI_INT, first, world);
  message.resize(std::size_t(header[1]));
  MPI_Bcast(message.data(), header[1], MPI_CHAR, first, world);
  if (Failure(header[0]) == Failure::corrupt) throw CorruptCheckpoint(message);
  throw InputError(message);
}

std::string broadcast_string(MPI_Comm world, std::string text) {
  int size = int(text.size());
  MPI_Bcast(&size, 1, MPI_INT, 0, world);
  text.resize(std::size_t(size));
  MPI_Bcast(text.data(), size, MPI_CHAR, 0, world);
  return text;
}

// ---- writing ------------------------------------------------------------------------------------------

template <class T> hid_t file_type() { return std::is_same_v<T, float> ? H5T_IEEE_F32LE : H5T_IEEE_F64LE; }
template <class T> hid_t memory_type() { return std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE; }

template <class T>
void write_tensor(hid_t file, const std::string& name, const std::vector<std::int64_t>& shape, const T* data,
                  const std::string& label) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  const Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  // Chunks of whole rows up to chunk_bytes, so that Fletcher32 (which needs chunks) covers every byte.
  std::vector<hsize_t> chunk = dims;
  hsize_t row_bytes = sizeof(T);
  for (std::size_t d = 1; d < dims.size(); ++d) row_bytes *= dims[d];
  chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], chunk_bytes / std::max<hsize_t>(row_bytes, 1)));
  const Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(properties.get(), int(chunk.size()), chunk.data());
  if (H5Zfilter_avail(H5Z_FILTER_FLETCHER32) > 0) H5Pset_fletcher32(properties.get());
  const Handle links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(links.get(), 1);
  const Handle dataset(
      H5Dcreate2(file, name.c_str(), file_type<T>(), space.get(), links.get(), properties.get(), H5P_DEFAULT),
      H5Dclose);
  check_write(dataset.valid() ? H5Dwrite(dataset.get(), memory_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1,
              label, "dataset " + name);
  std::int64_t numel = 1;
  for (auto d : shape) numel *= d;
  write_u64_attribute(dataset.get(), "fnv1a64", model::hash_bytes(data, sizeof(T) * std::size_t(numel)), label);
}

template <class T> std::vector<T> host_copy(const View1<T>& flat) {
  std::vector<T> host(flat.extent(0));
  Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> target(host.data(), host.size());
  Kokkos::deep_copy(target, flat);
  return host;
}

void pause_if_asked(std::int64_t step, const std::string& file) {
  const PauseHook hook = pause_hook_from_environment();
  if (hook.step != step || hook.seconds <= 0) return;
  std::fprintf(stderr, "kpipe: test hook: pausing %g s in the middle of writing %s\n", hook.seconds, file.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(hook.seconds));
}

// This rank's tensors (values and both moments) into its own file; returns their names, one per line.
template <class T> std::string write_rank_file(runtime::Trainer<T>& trainer, const std::string& path) {
  const auto& grid = trainer.grid();
  std::string names;
  {
    const Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    require(file.valid(), "checkpoint file '{}': cannot create", path);
    write_string_attribute(file.get(), "format", std::string(checkpoint_format) + "-part", path);
    write_int_attribute(file.get(), "format_version", checkpoint_format_version, path);
    write_int_attribute(file.get(), "step", trainer.next_step(), path);
    write_int_attribute(file.get(), "stage", grid.stage, path);
    std::size_t written = 0, total = 0;
    for (int c = 0; c < trainer.chunks(); ++c) total += trainer.chunk(c).params().slots().size();
    for (int c = 0; c < trainer.chunks(); ++c) {
      const auto& store = trainer.chunk(c).params();
      const auto values = host_copy(store.values());
      const auto moment1 = host_copy(store.moment1());
      const auto moment2 = host_copy(store.moment2());
      for (const auto& slot : store.slots()) {
        const std::string name = slot.path();
        write_tensor(file.get(), model_root + name, slot.spec->shape, values.data() + slot.offset, path);
        write_tensor(file.get(), moment1_root + name, slot.spec->shape, moment1.data() + slot.offset, path);
        write_tensor(file.get(), moment2_root + name, slot.spec->shape, moment2.data() + slot.offset, path);
        names += name + "\n";
        if (++written == total / 2) {
          H5Fflush(file.get(), H5F_SCOPE_LOCAL);
          pause_if_asked(trainer.next_step(), path);
        }
      }
    }
  }
  fsync_path(path);
  return names;
}

// Every replica-0 rank's tensor names, per pipeline stage, on world rank 0.
std::vector<std::string> gather_names(const comm::ProcessGrid& grid, const std::string& mine) {
  const std::string local = grid.replica == 0 ? mine : std::string();
  int length = int(local.size());
  std::vector<int> lengths(std::size_t(grid.world_size), 0), offsets(std::size_t(grid.world_size), 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, grid.world);
  int total = 0;
  for (int r = 0; r < grid.world_size; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(std::size_t(grid.world_rank == 0 ? total : 0), '\0');
  MPI_Gatherv(local.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, grid.world);
  std::vector<std::string> per_stage;
  if (grid.world_rank == 0)
    for (int s = 0; s < grid.pipeline_size; ++s) per_stage.push_back(all.substr(offsets[s], lengths[s]));  // replica 0
  return per_stage;
}

template <class T>
void write_entry_file(runtime::Trainer<T>& trainer, const std::string& path, const std::vector<std::string>& names) {
  const Config& config = trainer.config();
  const Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  require(file.valid(), "checkpoint file '{}': cannot create", path);
  const hid_t root = file.get();
  write_string_attribute(root, "format", checkpoint_format, path);
  write_int_attribute(root, "format_version", checkpoint_format_version, path);
  write_string_attribute(root, "kpipe_version", kpipe::version, path);
  write_string_attribute(root, "created", utc_now(), path);
  write_int_attribute(root, "step", trainer.next_step(), path);
  write_string_attribute(root, "config", to_toml(config), path);
  write_string_attribute(root, "scalar_type", std::is_same_v<T, float> ? "float32" : "float64", path);
  write_int_attribute(root, "pipeline_size", config.pipeline.pipeline_size, path);
  write_int_attribute(root, "data_parallel", config.pipeline.data_parallel, path);
  write_int_attribute(root, "chunks", config.pipeline.chunks, path);
  write_string_attribute(root, "schedule", config.pipeline.schedule_file.empty() ? config.pipeline.schedule
                                                                                  : config.pipeline.schedule_file,
                         path);
  std::int64_t tensors = 0;
  std::string files;
  const Handle links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(links.get(), 1);
  for (std::size_t stage = 0; stage < names.size(); ++stage) {
    const std::string target = rank_file_name(int(stage));
    files += (stage ? "," : "") + target;
    std::size_t start = 0;
    for (std::size_t end; (end = names[stage].find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string name = names[stage].substr(start, end - start);
      for (const char* prefix : {model_root, moment1_root, moment2_root}) {
        const std::string object = prefix + name;
        check_write(H5Lcreate_external(target.c_str(), object.c_str(), root, object.c_str(), links.get(), H5P_DEFAULT),
                    path, "link " + object);
      }
      ++tensors;
    }
  }
  write_int_attribute(root, "tensors", tensors, path);
  write_string_attribute(root, "files", files, path);
  // What the model's token ids mean, so that kpipe-generate decodes them (io/tokenizer_store.hpp).
  write_tokenizer(root, trainer.corpus().tokenizer, path);

  const Handle training(H5Gcreate2(root, "training", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  write_int_attribute(training.get(), "step", trainer.next_step(), path);
  write_u64_attribute(training.get(), "seed", config.train.seed, path);
  write_string_attribute(training.get(), "sampler",
                         "windows keyed by (train.seed, step, sequence): the step is the sampler's position", path);
  write_string_attribute(training.get(), "rng",
                         "none beyond train.seed: initialization is keyed by (seed, layer, name), sampling by "
                         "(seed, step, sequence)",
                         path);
  const Handle optimizer(H5Gopen2(root, "optimizer", H5P_DEFAULT), H5Gclose);
  if (optimizer.valid()) {
    write_string_attribute(optimizer.get(), "kind", config.optim.kind, path);
    // AdamW's bias correction uses the count of updates so far, which is the step counter.
    write_int_attribute(optimizer.get(), "step", trainer.next_step(), path);
  }
}

// ---- reading ------------------------------------------------------------------------------------------

struct EntryFile {
  std::string path;  // checkpoint.h5
  std::string dir;   // its directory (rank files are named relative to it)
};

Handle open_entry(const EntryFile& entry) {
  Handle file(H5Fopen(entry.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid())
    throw CorruptCheckpoint(
        fmt::format("checkpoint file '{}': cannot open (missing, truncated or not HDF5)", entry.path));
  std::string format;
  std::int64_t version = 0;
  if (!read_string_attribute(file.get(), "format", format) || format != checkpoint_format)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}': not a kpipe checkpoint (attribute format = '{}')",
                                        entry.path, format));
  require(read_int_attribute(file.get(), "format_version", version) && version >= 1 &&
              version <= checkpoint_format_version,
          "checkpoint file '{}': format_version = {} (this kpipe reads 1 to {})", entry.path, version,
          checkpoint_format_version);
  return file;
}

// Whether every link along the path exists (H5Lexists needs the parents to exist).
bool link_exists(hid_t file, const std::string& path) {
  for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) return true;
  }
}

// The file that holds an object: the target of its external link, or the entry file itself.
std::string holder_of(hid_t file, const std::string& name, const EntryFile& entry) {
  H5L_info_t info{};
  if (H5Lget_info(file, name.c_str(), &info, H5P_DEFAULT) < 0 || info.type != H5L_TYPE_EXTERNAL) return entry.path;
  std::vector<char> value(info.u.val_size);
  const char* target_file = nullptr;
  const char* target_object = nullptr;
  unsigned flags = 0;
  if (H5Lget_val(file, name.c_str(), value.data(), value.size(), H5P_DEFAULT) < 0 ||
      H5Lunpack_elink_val(value.data(), value.size(), &flags, &target_file, &target_object) < 0)
    return entry.path;
  return (fs::path(entry.dir) / target_file).string();
}

// Reads one tensor by name into dest (numel elements), checking shape, Fletcher32 and the FNV-1a sum.
template <class T>
void read_tensor(hid_t file, const EntryFile& entry, const std::string& name, const model::ParamSpec& spec,
                 T* dest) {
  if (!link_exists(file, name))
    throw InputError(fmt::format("checkpoint '{}': the model's tensor {} (shape {}) is not in the checkpoint",
                                 entry.dir, name, shape_text(spec.shape)));
  const std::string holder = holder_of(file, name, entry);
  const Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid())
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}': cannot open dataset {} (file missing, truncated or "
                                        "corrupt)",
                                        holder, name));
  const Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(std::size_t(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  const std::vector<std::int64_t> stored(dims.begin(), dims.end());
  if (stored != spec.shape)
    throw InputError(fmt::format("checkpoint '{}': tensor {} has shape {} in the checkpoint, {} in the model",
                                 entry.dir, name, shape_text(stored), shape_text(spec.shape)));
  const Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const std::size_t size = H5Tget_size(type.get());
  if (H5Tget_class(type.get()) != H5T_FLOAT || (size != 4 && size != 8))
    throw InputError(fmt::format("checkpoint file '{}': dataset {} is not float32 or float64", holder, name));
  const std::size_t numel = std::size_t(spec.numel());
  const hid_t stored_memory = size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  std::vector<unsigned char> raw(numel * std::max(size, sizeof(T)));
  if (H5Dread(dataset.get(), stored_memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}': dataset {} cannot be read (Fletcher32 checksum "
                                        "mismatch or truncated file)",
                                        holder, name));
  std::uint64_t want = 0;
  if (!read_u64_attribute(dataset.get(), "fnv1a64", want))
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}': dataset {} has no fnv1a64 attribute", holder, name));
  const std::uint64_t got = model::hash_bytes(raw.data(), numel * size);
  if (got != want)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}': dataset {} fails its checksum (fnv1a64 stored "
                                        "{:016x}, computed {:016x})",
                                        holder, name, want, got));
  if (size != sizeof(T) && H5Tconvert(stored_memory, memory_type<T>(), numel, raw.data(), nullptr, H5P_DEFAULT) < 0)
    throw InputError(fmt::format("checkpoint file '{}': dataset {} cannot be converted", holder, name));
  std::memcpy(dest, raw.data(), numel * sizeof(T));
}

template <class T> void copy_to_device(const std::vector<T>& host, const View1<T>& flat) {
  Kokkos::View<const T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> source(host.data(), host.size());
  Kokkos::deep_copy(flat, source);
}

}  // namespace

// ---- public -------------------------------------------------------------------------------------------

PauseHook pause_hook_from_environment() {
  PauseHook hook;
  if (const char* text = std::getenv("KPIPE_TEST_PAUSE_IN_CHECKPOINT")) {
    long long step = -1;
    double seconds = 0;
    if (std::sscanf(text, "%lld:%lf", &step, &seconds) == 2) hook = {step, seconds};
  }
  return hook;
}

void validate_checkpoint_config(const CheckpointConfig& config) {
  require(config.keep >= 2, "checkpoint.keep = {}: expected an integer >= 2", config.keep);
  require(config.every >= 0, "checkpoint.every = {}: expected an integer >= 0", config.every);
  require(config.fallback == "error" || config.fallback == "previous",
          "checkpoint.fallback = \"{}\": expected \"error\" or \"previous\"", config.fallback);
  require(config.resume != "latest" || !config.dir.empty(),
          "checkpoint.resume = \"latest\" needs checkpoint.dir (--checkpoint-dir)");
  require(config.every == 0 || !config.dir.empty(), "checkpoint.every = {} needs checkpoint.dir (--checkpoint-dir)",
          config.every);
}

std::string entry_file_of(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (fs::is_regular_file(fs::path(path) / checkpoint_entry_file, ec)) {
    const std::string name = fs::path(path).filename().string();
    require(name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") != 0,
            "checkpoint '{}': an incomplete checkpoint (still being written, or its writer was killed)", path);
    return (fs::path(path) / checkpoint_entry_file).string();
  }
  const CheckpointRef latest = latest_checkpoint(path);
  require(!latest.path.empty(), "checkpoint '{}': no complete checkpoint there", path);
  return (fs::path(latest.path) / checkpoint_entry_file).string();
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const QuietHdf5Errors quiet;
  EntryFile entry{entry_file_of(path), {}};
  entry.dir = fs::path(entry.path).parent_path().string();
  const Handle file = open_entry(entry);
  CheckpointInfo info;
  std::int64_t value = 0;
  read_int_attribute(file.get(), "step", info.step);
  if (read_int_attribute(file.get(), "format_version", value)) info.format_version = int(value);
  if (read_int_attribute(file.get(), "pipeline_size", value)) info.pipeline_size = int(value);
  if (read_int_attribute(file.get(), "data_parallel", value)) info.data_parallel = int(value);
  if (read_int_attribute(file.get(), "chunks", value)) info.chunks = int(value);
  read_int_attribute(file.get(), "tensors", info.tensors);
  read_string_attribute(file.get(), "kpipe_version", info.kpipe_version);
  read_string_attribute(file.get(), "created", info.created);
  read_string_attribute(file.get(), "schedule", info.schedule);
  if (!read_string_attribute(file.get(), "config", info.config_toml))
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}': no config attribute", entry.path));
  return info;
}

Config checkpoint_config(const std::string& path) {
  const CheckpointInfo info = read_checkpoint_info(path);
  // load_config_file reads files: hand it the attribute through a private temporary file.
  std::string name = (fs::temp_directory_path() / "kpipe-config-XXXXXX").string();
  const int fd = ::mkstemp(name.data());
  require(fd >= 0, "checkpoint '{}': cannot create a temporary file for its config", path);
  ::close(fd);
  std::ofstream(name) << info.config_toml;
  try {
    Config config = load_config_file(name, Config{});
    fs::remove(name);
    return config;
  } catch (const InputError& e) {
    fs::remove(name);
    throw InputError(fmt::format("checkpoint '{}': config attribute: {}", path, e.what()));
  }
}

template <class T> std::string save_checkpoint(runtime::Trainer<T>& trainer, const std::string& dir, int keep) {
  const auto& grid = trainer.grid();
  const std::string final_path = (fs::path(dir) / step_dir_name(trainer.next_step())).string();
  // A checkpoint with a non-finite value is never written: every rank checks its state, all agree.
  int bad = 0;
  for (int c = 0; c < trainer.chunks(); ++c) {
    const auto& store = trainer.chunk(c).params();
    for (const auto* buffer : {&store.values(), &store.moment1(), &store.moment2()})
      if (!std::isfinite(nn::sum_squares<T>(ExecSpace(), *buffer))) bad = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, grid.world);
  if (bad)
    throw std::runtime_error(fmt::format("refusing to write checkpoint {}: the model or optimizer state holds "
                                         "non-finite values", final_path));
  const std::string tmp = final_path + ".tmp";
  collectively(grid.world, [&] {
    if (grid.world_rank != 0) return;
    fs::create_directories(dir);
    fs::remove_all(tmp);
    fs::create_directory(tmp);
  });
  std::string names;
  collectively(grid.world, [&] {
    const QuietHdf5Errors quiet;
    if (grid.replica == 0) names = write_rank_file(trainer, (fs::path(tmp) / rank_file_name(grid.stage)).string());
  });
  const auto per_stage = gather_names(grid, names);
  // Every rank file is complete and fsynced: rank 0 links them, publishes the directory, then `latest`.
  collectively(grid.world, [&] {
    if (grid.world_rank != 0) return;
    const QuietHdf5Errors quiet;
    const std::string entry = (fs::path(tmp) / checkpoint_entry_file).string();
    write_entry_file(trainer, entry, per_stage);
    fsync_path(entry);
    publish_directory(tmp, final_path);
    write_latest(dir, fs::path(final_path).filename().string());
    prune_checkpoints(dir, keep);
  });
  return final_path;
}

template <class T> void load_checkpoint(runtime::Trainer<T>& trainer, const std::string& path) {
  std::int64_t step = 0;
  collectively(trainer.grid().world, [&] {
    const QuietHdf5Errors quiet;
    EntryFile entry{entry_file_of(path), {}};
    entry.dir = fs::path(entry.path).parent_path().string();
    const Handle file = open_entry(entry);
    require(read_int_attribute(file.get(), "step", step) && step >= 0, "checkpoint file '{}': no valid step attribute",
            entry.path);
    std::int64_t tensors = 0;
    read_int_attribute(file.get(), "tensors", tensors);
    std::int64_t model_tensors = 0;
    for (const auto& layer : trainer.desc().layers) model_tensors += std::int64_t(layer.params.size());
    for (int c = 0; c < trainer.chunks(); ++c) {
      auto& store = trainer.chunk(c).params();
      std::vector<T> values(store.size()), moment1(store.size()), moment2(store.size());
      for (const auto& slot : store.slots()) {
        const std::string name = slot.path();
        read_tensor(file.get(), entry, model_root + name, *slot.spec, values.data() + slot.offset);
        read_tensor(file.get(), entry, moment1_root + name, *slot.spec, moment1.data() + slot.offset);
        read_tensor(file.get(), entry, moment2_root + name, *slot.spec, moment2.data() + slot.offset);
      }
      copy_to_device(values, store.values());
      copy_to_device(moment1, store.moment1());
      copy_to_device(moment2, store.moment2());
    }
    // Every tensor of the model was found; a checkpoint with more is of a larger model.
    require(tensors == model_tensors,
            "checkpoint '{}': holds {} tensors, the model {} (model.n_layers = {}): not the same model", entry.dir,
            tensors, model_tensors, trainer.desc().config.n_layers);
  });
  trainer.set_next_step(step);
}

template <class T> std::string resume_training(runtime::Trainer<T>& trainer, const CheckpointConfig& config) {
  if (config.resume.empty()) return {};
  const auto& grid = trainer.grid();
  // Rank 0 picks the candidates (newest first) so that every rank tries the same ones.
  std::string candidates;
  if (grid.world_rank == 0) {
    if (config.resume == "latest") {
      const auto all = complete_checkpoints(config.dir);
      const CheckpointRef latest = latest_checkpoint(config.dir);
      if (!latest.path.empty()) candidates += latest.path + "\n";
      for (auto it = all.rbegin(); it != all.rend(); ++it)
        if (it->step < latest.step) candidates += it->path + "\n";
    } else {
      candidates = config.resume + "\n";
    }
  }
  candidates = broadcast_string(grid.world, candidates);
  std::vector<std::string> list;
  for (std::size_t start = 0, end; (end = candidates.find('\n', start)) != std::string::npos; start = end + 1)
    list.push_back(candidates.substr(start, end - start));
  const bool speak = grid.world_rank == 0;
  if (list.empty()) {
    if (speak) std::fprintf(stderr, "kpipe: no checkpoint in '%s' yet: starting from step 0\n", config.dir.c_str());
    return {};
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    try {
      load_checkpoint(trainer, list[i]);
      if (speak)
        std::fprintf(stderr, "kpipe: resumed from checkpoint %s (step %lld)\n", list[i].c_str(),
                     static_cast<long long>(trainer.next_step()));
      return list[i];
    } catch (const CorruptCheckpoint& e) {
      if (config.fallback != "previous" || i + 1 == list.size()) throw;
      if (speak)
        std::fprintf(stderr, "kpipe: %s; falling back to the previous complete checkpoint %s\n", e.what(),
                     list[i + 1].c_str());
    }
  }
  return {};
}

template std::string save_checkpoint(runtime::Trainer<float>&, const std::string&, int);
template std::string save_checkpoint(runtime::Trainer<double>&, const std::string&, int);
template void load_checkpoint(runtime::Trainer<float>&, const std::string&);
template void load_checkpoint(runtime::Trainer<double>&, const std::string&);
template std::string resume_training(runtime::Trainer<float>&, const CheckpointConfig&);
template std::string resume_training(runtime::Trainer<double>&, const CheckpointConfig&);

}  // namespace kpipe::io
