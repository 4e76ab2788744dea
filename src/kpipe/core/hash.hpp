#pragma once
// The hashes kpipe keeps of bytes. Not cryptographic: they find flipped bits, truncations and mix-ups, not
// forgeries.
//
// XXH64 (xxHash's 64-bit hash, seed 0; any xxHash library gives the same value, e.g. Python's
// `xxhash.xxh64_intdigest(data)`) names a model's state (param_checksum) and checks every dataset of a
// checkpoint (docs/checkpoint-format.md). It reads 32 bytes a round in four independent lanes, about 20 times
// the speed of a byte-serial hash, so that checking a checkpoint costs less than the disk's time for it.
// FNV-1a 64 is byte-serial (one multiply per byte, about 0.5 GB/s on one core): what checkpoints of
// format_version 2 and the tokenizer datasets of token files carry, and still read. Its basis,
// 1469598103934665603, is a digit short of FNV's published 14695981039346656037: files written with it keep it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kpipe {

// XXH64 of bytes given in pieces of any sizes: update(a); update(b) gives xxh64 of a followed by b.
class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0);
  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;

 private:
  std::array<std::uint64_t, 4> lanes_;
  std::array<unsigned char, 32> pending_{};  // a round's bytes not yet consumed
  std::size_t pending_bytes_ = 0;
  std::uint64_t total_bytes_ = 0;
  std::uint64_t seed_;
};

std::uint64_t xxh64(const void* data, std::size_t bytes, std::uint64_t seed = 0);
inline std::uint64_t xxh64(std::string_view text, std::uint64_t seed = 0) {
  return xxh64(text.data(), text.size(), seed);
}

inline constexpr std::uint64_t fnv1a64_basis = 1469598103934665603ull;

// FNV-1a 64 of `bytes` bytes at data, continuing from h (the basis for a fresh hash).
inline std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t h = fnv1a64_basis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline std::uint64_t fnv1a64(std::string_view text, std::uint64_t h = fnv1a64_basis) {
  return fnv1a64(text.data(), text.size(), h);
}

// Which of the two a file's hash is: its name is the attribute's and the manifest key's ("xxh64", "fnv1a64").
enum class ByteHash { fnv1a64, xxh64 };
const char* to_string(ByteHash kind);
std::uint64_t hash_bytes(ByteHash kind, std::string_view bytes);

// 16 lower-case hex digits, as checkpoints and logs print it.
std::string hash_hex(std::uint64_t hash);

}  // namespace kpipe
