#pragma once
// The one HDF5 helper layer, over the HDF5 C API, for checkpoints, traces, timelines and token files:
// handles that close themselves, the element-type map, files opened without depending on environment
// variables, extendible chunked datasets that grow by rows (deflate-compressed when the HDF5 build has the
// filter, and Fletcher-32 checksummed), attributes, whole-dataset reads and reads of a range of a 1-D dataset
// (a hyperslab), and HDF5's own reason for a failure in words. Errors are kpipe::InputError naming the file
// and the object.
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace kpipe::h5 {

// HDF5 as Debian builds it (parallel, 1.10) is not thread-safe: no two of its calls may overlap in a process.
// kpipe calls it from a second thread only to write a checkpoint beside the training (io/checkpoint_saver.hpp),
// so what may run meanwhile holds this lock around its HDF5 calls: the token reads, traces and timelines on
// the training thread, the checkpoint writer's file layout and its reads of older checkpoints on the other.
// One lock for the one library in the process; not recursive: taken where the calls are, not by callers.
[[nodiscard]] std::unique_lock<std::mutex> exclusive();

// An HDF5 identifier closed when it goes out of scope (movable, not copyable).
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      close_ = other.close_;
      other.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  hid_t release() {  // the caller closes it (to see the close's status)
    const hid_t id = id_;
    id_ = -1;
    return id;
  }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Silences HDF5's automatic error-stack printing while alive: the user sees our one line instead.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t function_ = nullptr;
  void* data_ = nullptr;
};

// The HDF5 types of a C++ element type: stored little-endian in files, native in memory. The one
// float/double map for every file kpipe writes.
template <class T> hid_t file_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_IEEE_F32LE;
  else if constexpr (std::is_same_v<T, double>) return H5T_IEEE_F64LE;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return H5T_STD_U8LE;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return H5T_STD_U16LE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_STD_I32LE;
  else if constexpr (std::is_same_v<T, std::int64_t>) return H5T_STD_I64LE;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return H5T_STD_U64LE;
  else static_assert(std::is_same_v<T, float>, "no HDF5 type for this type");
}
template <class T> hid_t memory_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return H5T_NATIVE_UINT16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return H5T_NATIVE_UINT64;
  else static_assert(std::is_same_v<T, float>, "no HDF5 type for this type");
}

// HDF5's reason for the failure just seen (the innermost message of the current error stack, e.g.
// "unable to open file: name = 'x.h5', errno = 2, error message = 'No such file or directory'"), or "".
std::string error_text();

// Called first thing in every kpipe program, before MPI_Init: HDF5 starts with its own error printing off
// (kpipe reports every failure itself, in one line; QuietErrors keeps library users' printing intact around
// kpipe's calls) and is not shut down at exit. After a failed open of a dataset whose address is damaged,
// HDF5 1.10's shutdown loops on state of its own that no API call frees, and prints "HDF5: infinite loop
// closing library" and a line of junk; every object kpipe opens is closed by its Handle, so skipping the
// shutdown loses nothing. Started before MPI_Init, parallel HDF5 does not tie its shutdown to MPI_Finalize.
void start_for_program();

// The file-access properties of every file kpipe opens or creates: HDF5's file locking off (kpipe's
// writers lock their own way; the same flags everywhere let a process read a file it is writing).
Handle file_access();
Handle create_file(const std::string& path);  // truncates
// Read-only. The path must be a regular file (a FIFO or device is refused, never opened) holding HDF5;
// HDF5's file locking is off (kpipe's writers lock their own way), so that the open does not depend on
// HDF5_USE_FILE_LOCKING or on a file system's flock support. InputError otherwise.
Handle open_file(const std::string& path);
// open_file, with HDF5's metadata cache held at `metadata_cache_bytes` (bytes as stored; HDF5 holds several
// times more in memory for them): a reader that wanders over a large chunked dataset (a token file read by
// windows) fills the cache with the nodes of the chunk index it visits.
Handle open_file_with_fixed_cache(const std::string& path, std::size_t metadata_cache_bytes);
// Whether path is a readable regular file holding HDF5 (never opens a FIFO or device).
bool is_hdf5_file(const std::string& path);
bool exists(hid_t location, const std::string& path);  // every link along "a/b/c" exists
Handle open_dataset(hid_t location, const std::string& name, const std::string& label);
Handle open_group(hid_t location, const std::string& path);
Handle require_group(hid_t location, const std::string& path);  // creates missing groups along the path
std::vector<std::string> children(hid_t group);  // link names, in name order

// Whether this HDF5 build can write deflate-compressed datasets.
bool deflate_available();

// An empty extendible, chunked dataset [0 of unlimited, row_shape...] of `file_type` under `location`:
// about 64 KiB per chunk, with the filters of h5/stored_chunks.hpp (deflate where the build can, and a
// Fletcher-32 checksum that every read verifies).
Handle create_extendible(hid_t location, const std::string& name, hid_t file_type,
                         const std::vector<hsize_t>& row_shape = {});

// Appends `rows` rows of shape `row_shape` (empty: scalars) to the dataset `name` under `location`,
// created on first use as an extendible, chunked dataset [unlimited, row_shape...] of `file_type` (about
// 64 KiB per chunk; deflated where the build can, and Fletcher-32 checksummed, which every read verifies).
void append(hid_t location, const std::string& name, hid_t file_type, hid_t memory_type, const void* data,
            hsize_t rows, const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<double>& values,
            const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<std::int64_t>& values,
            const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<std::int32_t>& values,
            const std::vector<hsize_t>& row_shape = {});
void append(hid_t location, const std::string& name, const std::vector<float>& values,
            const std::vector<hsize_t>& row_shape = {});

// Creates the dataset `name` of shape `dims` under `location` and writes all of it from `data` (in
// memory_type; HDF5 converts to file_type). `compress`: chunked (about 64 KiB per chunk), deflated when the
// build has the filter, and Fletcher-32 checksummed; otherwise contiguous. Empty datasets are always
// contiguous.
void write_dataset(hid_t location, const std::string& name, hid_t file_type, hid_t memory_type, const void* data,
                   const std::vector<hsize_t>& dims, bool compress = false);
// A 1-D uint8 dataset holding `bytes` (a serialized model, say).
void write_bytes(hid_t location, const std::string& name, const std::string& bytes);

std::vector<hsize_t> shape(hid_t location, const std::string& name);
// The class of the dataset's element type (H5T_INTEGER, H5T_FLOAT, ...).
H5T_class_t type_class(hid_t location, const std::string& name, const std::string& label);
// The whole dataset converted to the requested type (HDF5 converts); `label` names the file in errors.
std::vector<double> read_doubles(hid_t location, const std::string& name, const std::string& label);
std::vector<std::int64_t> read_int64s(hid_t location, const std::string& name, const std::string& label);
std::vector<std::int32_t> read_int32s(hid_t location, const std::string& name, const std::string& label);
// A 1-D dataset's elements as uint8, as bytes.
std::string read_bytes(hid_t location, const std::string& name, const std::string& label);

// The length of a chunked dataset's chunks along its first dimension; 0 for a contiguous (or compact) one.
hsize_t chunk_length(hid_t dataset);

// The storage a dataset's extent spans and how much of it was ever written: chunks of a chunked dataset, one
// block for a contiguous one. HDF5 reads what was never written as the fill value, without an error: a file
// whose extent claims more than its data (written by another tool, or by a writer that died) is found here.
struct WrittenStorage {
  hsize_t spanned = 0, written = 0;
  bool complete() const { return written >= spanned; }
};
WrittenStorage written_storage(hid_t dataset);

// Where a chunk lies in a 1-D chunked dataset: index of count, and the elements [first, end) it holds.
struct ChunkPosition {
  hsize_t index = 0, count = 0;
  hsize_t first = 0, end = 0;
};
// Why a range of a dataset could not be read: HDF5's reason ("data error detected by Fletcher32 checksum",
// say) and, in a chunked dataset, the first chunk of the range that fails when read on its own.
struct ReadFailure {
  std::string reason;
  std::optional<ChunkPosition> chunk;
};
// Elements [first, first + count) of a 1-D dataset into `out`, as memory_type (HDF5 widens the stored
// type, a uint8 dataset read as int32 say, for these elements only): one hyperslab, so only the chunks that
// hold the range are read (and, filtered, decompressed and checksummed). nullopt when read, the failure
// otherwise. The range must lie inside the dataset.
std::optional<ReadFailure> read_range(hid_t dataset, hid_t memory_type, hsize_t first, hsize_t count, void* out);

// Flushes the file and closes it (the handle is released either way); InputError with HDF5's reason
// when either fails, so that a writer learns that its file is incomplete.
void close_file(Handle& file, const std::string& label);

void write_attribute(hid_t object, const std::string& name, const std::string& value);
void write_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_u64_attribute(hid_t object, const std::string& name, std::uint64_t value);
bool has_attribute(hid_t object, const std::string& name);
// What a kpipe file is, in its root group: attributes "format" (its kind) and "format_version".
void write_format(hid_t root, const std::string& format, std::int64_t version);
bool has_format(hid_t root, const std::string& format, const std::string& label);
std::string read_string_attribute(hid_t object, const std::string& name, const std::string& label);
std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& label);
std::uint64_t read_u64_attribute(hid_t object, const std::string& name, const std::string& label);

}  // namespace kpipe::h5
