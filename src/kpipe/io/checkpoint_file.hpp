#pragma once
// One checkpoint file (format_version 3, docs/checkpoint-format.md): named datasets (tensors and byte
// blobs) and attributes, every one of them listed in a manifest with the XXH64 hash of its bytes, and the
// manifest hashed in turn (format_version 2, still read, has FNV-1a 64 in their place). Nothing in the file is
// read without being checked against the manifest.
//
// What is stored knows nothing of training: a CheckpointWriter takes each rank's named tensors and blobs
// and writes them, collectively, into one HDF5 file; a CheckpointReader gives them back by name, verified.
// (io/checkpoint.hpp puts a trainer's state through these.)
//
// Writing, collective over the writer's communicator:
//   1. the declarations (name, type, shape) are gathered on every rank;
//   2. rank 0 creates the file and all the datasets (contiguous, space allocated at creation, never
//      filled), the attributes and the manifest's space: HDF5 metadata only, written by one process so that
//      a failure there is one rank's failure with its reason (docs/checkpoint-format.md says why not
//      collective creation), with zeros for the hashes (their sizes are fixed); the offsets are broadcast;
//   3. each rank writes its own datasets' bytes at those offsets (pwrite), hashing each piece as it writes it
//      and starting its write-back (the disk works while the rest is written), fsyncs, and reports success or
//      the errno of the first failure;
//   4. every rank learns the lowest failing rank's message (or that all succeeded) and every hash;
//   5. rank 0 records the hashes (each dataset's attribute, the manifest and its hash) and fsyncs.
// No file-system failure throws: write() returns the agreed status, the same on every rank.
#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::io {

inline constexpr const char* checkpoint_format = "kpipe-checkpoint";
inline constexpr int checkpoint_format_version = 3;  // what is written
inline constexpr int oldest_read_format_version = 2;

// The hash a format_version's files carry (2: FNV-1a 64, byte-serial and slow; 3: XXH64).
constexpr ByteHash hash_of_format(int format_version) {
  return format_version >= 3 ? ByteHash::xxh64 : ByteHash::fnv1a64;
}

// The checkpoint's bytes are damaged or missing (unreadable file, failed checksum, a dataset that does not
// belong to it): with checkpoint.fallback = "previous" the one before is tried. Other InputErrors (a
// model that does not match, a format this kpipe does not read) are final.
struct CorruptCheckpoint : InputError {
  using InputError::InputError;
};

enum class ElementType { float32, float64, uint8 };
const char* to_string(ElementType type);  // "float32", "float64", "uint8"
std::size_t size_of(ElementType type);

struct DatasetEntry {
  std::string name;                 // absolute: "/model/layers/07/attn/qkv/weight"
  ElementType type = ElementType::float32;
  std::vector<std::int64_t> shape;  // row-major; a blob is 1-D, its length in bytes
  std::uint64_t hash = 0;           // of the stored bytes (little-endian, row-major), the file's ByteHash
  std::int64_t numel() const;
  std::size_t bytes() const { return std::size_t(numel()) * size_of(type); }
};

// Attributes by (object, name): ("/", "step") -> 12, ("/optimizer", "kind") -> "adamw".
using AttributeValue = std::variant<std::int64_t, std::string>;
using Attributes = std::map<std::pair<std::string, std::string>, AttributeValue>;

// The outcome of a collective write, the same on every rank.
struct WriteStatus {
  bool ok = true;
  int rank = -1;        // the lowest rank that failed
  std::string message;  // its reason: what it could not do, with the errno text
  std::uint64_t manifest_hash = 0;  // of the file written (when ok)
};

class CheckpointWriter {
 public:
  // Collective operations run over comm, each bounded by timeout_s (pipeline.recv_timeout_s); `nodes` (of every
  // world rank, ProcessGrid::nodes) lets a timeout name the node of each rank it names.
  CheckpointWriter(MPI_Comm comm, double timeout_s, std::shared_ptr<const std::vector<std::string>> nodes = nullptr);

  // This rank's share, hashed when written. Data must stay valid until write() returns; names are absolute
  // and unique over all ranks (a name given twice is a std::logic_error on every rank).
  void add_tensor(const std::string& name, const std::vector<std::int64_t>& shape, const float* data);
  void add_tensor(const std::string& name, const std::vector<std::int64_t>& shape, const double* data);
  void add_blob(const std::string& name, std::string bytes);  // kept by the writer
  // The same on every rank. Objects other than "/" are groups, created when absent.
  void set_attribute(const std::string& object, const std::string& name, AttributeValue value);

  // Collective: creates (or truncates) path and writes everything into it.
  WriteStatus write(const std::string& path);

 private:
  struct Local {
    DatasetEntry entry;
    const void* data = nullptr;
    std::shared_ptr<const std::string> owned;  // a blob's bytes (data points into them)
  };
  void add(const std::string& name, ElementType type, const std::vector<std::int64_t>& shape, const void* data);

  MPI_Comm comm_;
  double timeout_s_;
  std::shared_ptr<const std::vector<std::string>> nodes_;
  std::vector<Local> local_;
  Attributes attributes_;
};

// Reads one checkpoint file on one process (no MPI). The constructor checks the format and its version,
// the manifest's own hash, and that every attribute the file shows equals the manifest's copy; each read
// checks the dataset's type, shape and bytes against the manifest. Damage throws CorruptCheckpoint
// naming the file and the dataset or attribute; a format_version this kpipe does not read, InputError.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);

  const std::string& path() const { return path_; }
  const Attributes& attributes() const { return attributes_; }
  bool has(const std::string& object, const std::string& name) const;
  std::int64_t number(const std::string& name, const std::string& object = "/") const;
  std::string text(const std::string& name, const std::string& object = "/") const;
  const std::vector<DatasetEntry>& datasets() const { return datasets_; }  // in name order
  const DatasetEntry* find(const std::string& name) const;
  std::uint64_t manifest_hash() const { return manifest_hash_; }
  int format_version() const { return format_version_; }
  ByteHash hash_kind() const { return hash_of_format(format_version_); }

  // The tensor's values, converted to T (float32 <-> float64), after checking its bytes. `shape` is
  // what the caller expects: a different one is an InputError naming both.
  template <class T> void read_tensor(const std::string& name, const std::vector<std::int64_t>& shape, T* dest) const;
  std::string read_blob(const std::string& name) const;
  // Reads a dataset's bytes and checks them (kpipe-inspect); returns the stored bytes.
  std::string read_verified(const DatasetEntry& entry) const;

 private:
  // The dataset's entry.bytes() stored bytes into dest, checked against the manifest (dest is overwritten even
  // when they fail).
  void read_checked(const DatasetEntry& entry, void* dest) const;

  std::string path_;
  h5::Handle file_;
  Attributes attributes_;
  std::vector<DatasetEntry> datasets_;
  std::uint64_t manifest_hash_ = 0;
  int format_version_ = checkpoint_format_version;
};

// "[256, 16]"
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace kpipe::io
