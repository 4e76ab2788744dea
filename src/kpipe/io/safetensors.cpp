#include "kpipe/io/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe::io {

namespace {

using nlohmann::json;

// The reference library refuses larger headers; so does kpipe (a damaged length must not allocate gigabytes).
constexpr std::uint64_t max_header_bytes = 100u << 20;

struct Dtype {
  const char* name;
  std::size_t size;
};
constexpr Dtype dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                            {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                            {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

// IEEE half -> float, exactly (subnormals, infinities and NaNs included).
float float_of_half_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu, bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    exponent = 113;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Reads exactly `bytes` at `offset`; false at a short read.
bool read_at(int fd, void* data, std::size_t bytes, std::uint64_t offset) {
  auto* out = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, out, bytes, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    bytes -= std::size_t(got);
    offset += std::uint64_t(got);
  }
  return true;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Fd open_input(const std::string& path) {
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("'{}': cannot open ({})", path, reason));
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw InputError(fmt::format("'{}': cannot open ({})", path, std::strerror(errno)));
  return file;
}

std::int64_t checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0 || (d > 0 && n > (std::int64_t(1) << 50) / d)) return -1;
    n *= d;
  }
  return n;
}

// One header entry; `problem` says what is wrong with it ("" when well-formed).
SafeTensor entry_of(const std::string& name, const json& j, std::string& problem) {
  SafeTensor t;
  t.name = name;
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets")) {
    problem = "not an object with dtype, shape and data_offsets";
    return t;
  }
  if (!j["dtype"].is_string() || safetensors_dtype_size(j["dtype"].get<std::string>()) == 0) {
    problem = fmt::format("dtype {}: not a safetensors dtype", j["dtype"].dump());
    return t;
  }
  t.dtype = j["dtype"].get<std::string>();
  if (!j["shape"].is_array()) {
    problem = "shape is not an array";
    return t;
  }
  for (const auto& d : j["shape"]) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) {
      problem = fmt::format("shape {}: not a list of sizes", j["shape"].dump());
      return t;
    }
    t.shape.push_back(d.get<std::int64_t>());
  }
  const json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned() || offsets[0].get<std::uint64_t>() > offsets[1].get<std::uint64_t>()) {
    problem = fmt::format("data_offsets {}: not [begin, end] with begin <= end", offsets.dump());
    return t;
  }
  t.begin = offsets[0].get<std::uint64_t>();
  t.end = offsets[1].get<std::uint64_t>();
  const std::int64_t n = checked_numel(t.shape);
  if (n < 0 || t.end - t.begin != std::uint64_t(n) * safetensors_dtype_size(t.dtype))
    problem = fmt::format("data_offsets [{}, {}] hold {} bytes, its shape {} of {} needs {}", t.begin, t.end,
                          t.end - t.begin, j["shape"].dump(), t.dtype,
                          n < 0 ? std::string("too many") : std::to_string(std::uint64_t(n) * safetensors_dtype_size(t.dtype)));
  return t;
}

}  // namespace

std::int64_t SafeTensor::numel() const { return checked_numel(shape); }

std::size_t safetensors_dtype_size(const std::string& dtype) {
  for (const Dtype& d : dtypes)
    if (dtype == d.name) return d.size;
  return 0;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  const Fd file = open_input(path);
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  require(!ec, "'{}': cannot open ({})", path, ec.message());
  unsigned char length[8];
  require(size >= 8 && read_at(file.fd, length, 8, 0), "'{}': {} bytes, not a safetensors file (no header length)",
          path, size);
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | length[k];
  require(n <= size - 8 && n <= max_header_bytes,
          "'{}': header length {} does not fit the file's {} bytes (at most {}): damaged or not safetensors", path, n,
          size, std::min<std::uint64_t>(size - 8, max_header_bytes));
  std::string text(n, '\0');
  require(read_at(file.fd, text.data(), n, 8), "'{}': cannot read its header", path);
  data_start_ = 8 + n;
  const json header = json::parse(text, nullptr, false);
  require(!header.is_discarded() && header.is_object(), "'{}': the header is not a JSON object: damaged", path);
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      require(value.is_object(), "'{}': __metadata__ is not an object", path);
      for (const auto& [key, text_value] : value.items()) {
        require(text_value.is_string(), "'{}': __metadata__ {}: not a string", path, key);
        metadata_[key] = text_value.get<std::string>();
      }
      continue;
    }
    std::string problem;
    tensors_.push_back(entry_of(name, value, problem));
    require(problem.empty(), "'{}': tensor {}: {}", path, name, problem);
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const SafeTensor& a, const SafeTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Every byte of the data belongs to exactly one tensor, in order.
  std::uint64_t at = 0;
  for (const SafeTensor& t : tensors_) {
    require(t.begin == at, "'{}': tensor {} starts at data offset {}, expected {} ({}): damaged", path, t.name, t.begin,
            at, t.begin < at ? "it overlaps the tensor before" : "a gap before it");
    at = t.end;
  }
  require(at == size - data_start_, "'{}': its tensors end at data offset {}, the file's data has {} bytes: {}", path,
          at, size - data_start_, at > size - data_start_ ? "truncated" : "trailing bytes");
}

const SafeTensor* SafetensorsReader::find(const std::string& name) const {
  for (const SafeTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<float> SafetensorsReader::read_floats(const SafeTensor& t) const {
  const std::size_t size = safetensors_dtype_size(t.dtype);
  require(t.dtype == "F32" || t.dtype == "F64" || t.dtype == "F16" || t.dtype == "BF16",
          "'{}': tensor {} is {}: kpipe reads floating-point weights (F32, F64, F16, BF16)", path_, t.name, t.dtype);
  const std::size_t n = std::size_t(t.numel());
  std::string bytes(n * size, '\0');
  const Fd file = open_input(path_);
  require(read_at(file.fd, bytes.data(), bytes.size(), data_start_ + t.begin), "'{}': cannot read tensor {} (truncated?)",
          path_, t.name);
  std::vector<float> values(n);
  const char* p = bytes.data();
  for (std::size_t k = 0; k < n; ++k, p += size) {
    if (t.dtype == "F32") {
      std::memcpy(&values[k], p, 4);
    } else if (t.dtype == "F64") {
      double d;
      std::memcpy(&d, p, 8);
      values[k] = float(d);
    } else {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      values[k] = t.dtype == "BF16" ? float_of_bf16_bits(h) : float_of_half_bits(h);
    }
  }
  return values;
}

// ---- writing --------------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Declared>& tensors,
                                     const std::string& dtype, const std::map<std::string, std::string>& metadata)
    : path_(path), dtype_(dtype), tensors_(tensors) {
  if (dtype != "F32" && dtype != "BF16") throw std::logic_error("SafetensorsWriter: dtype " + dtype);
  json header = json::object();
  header["__metadata__"] = metadata;
  std::uint64_t at = 0;
  for (const Declared& t : tensors) {
    const std::uint64_t bytes = std::uint64_t(checked_numel(t.shape)) * safetensors_dtype_size(dtype);
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writes it
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), fmt::format("'{}': cannot create", path));
  unsigned char length[8];
  for (int k = 0; k < 8; ++k) length[k] = static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * k));
  put(length, 8);
  put(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsWriter::put(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::write(fd_, p, bytes);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) throw std::system_error(done < 0 ? errno : EIO, std::generic_category(), fmt::format("'{}': cannot write", path_));
    p += done;
    bytes -= std::size_t(done);
    written_ += std::uint64_t(done);
  }
}

void SafetensorsWriter::write(const std::vector<float>& values) {
  if (next_ >= tensors_.size() || std::int64_t(values.size()) != checked_numel(tensors_[next_].shape))
    throw std::logic_error("SafetensorsWriter::write: not the declared tensor's size");
  ++next_;
  if (dtype_ == "F32") return put(values.data(), values.size() * 4);
  std::vector<std::uint16_t> bits(values.size());
  std::transform(values.begin(), values.end(), bits.begin(), [](float v) { return bf16_bits_of(v); });
  put(bits.data(), bits.size() * 2);
}

void SafetensorsWriter::finish() {
  if (next_ != tensors_.size()) throw std::logic_error("SafetensorsWriter::finish: tensors left unwritten");
  if (::fsync(fd_) != 0) throw std::system_error(errno, std::generic_category(), fmt::format("'{}': cannot fsync", path_));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw std::system_error(errno, std::generic_category(), fmt::format("'{}': cannot close", path_));
}

}  // namespace kpipe::io
