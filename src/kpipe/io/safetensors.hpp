#pragma once
// safetensors, the tensor file of Hugging Face's libraries: 8 bytes (little-endian u64) N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [768, 2304], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"format": "pt"}}
// then the data, each tensor row-major and little-endian at [8 + N + begin, 8 + N + end).
//
// Read as strictly as kpipe's own files are: the header must lie within the file and be a JSON object of
// well-formed entries of known dtypes whose byte ranges match their shapes, follow each other without a
// gap or an overlap from 0, and end where the file ends (as the reference library requires). Anything
// else is an InputError naming the file and what is wrong, before a tensor is read: a damaged file is
// refused, never half-read.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kpipe::io {

struct SafeTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // within the data
  std::int64_t numel() const;
};

// The dtypes the format defines and their sizes in bytes (0: not one of them).
std::size_t safetensors_dtype_size(const std::string& dtype);

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafeTensor>& tensors() const { return tensors_; }  // in file order
  const SafeTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A floating-point tensor (F32, F64, F16 or BF16) as floats; InputError for any other dtype.
  std::vector<float> read_floats(const SafeTensor& tensor) const;

 private:
  std::string path_;
  std::uint64_t data_start_ = 0;
  std::vector<SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes one file, tensor after tensor in the order declared: memory is one tensor's. The header first (its
// offsets follow from the shapes), then each tensor's values as `dtype` ("F32", or "BF16" rounded to nearest
// even). Failures throw std::system_error naming the file; finish() makes the file durable.
class SafetensorsWriter {
 public:
  struct Declared {
    std::string name;
    std::vector<std::int64_t> shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Declared>& tensors, const std::string& dtype,
                    const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next declared tensor's values (its numel floats).
  void write(const std::vector<float>& values);
  void finish();
  std::uint64_t bytes() const { return written_; }

 private:
  void put(const void* data, std::size_t bytes);
  std::string path_, dtype_;
  std::vector<Declared> tensors_;
  std::size_t next_ = 0;
  int fd_ = -1;
  std::uint64_t written_ = 0;
};

}  // namespace kpipe::io
