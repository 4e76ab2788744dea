#pragma once
// The one hash kpipe uses for bytes: FNV-1a, 64 bits. It names a model's state (param_checksum), and every
// dataset of a checkpoint carries it (docs/checkpoint-format.md). Not cryptographic: it finds flipped bits,
// truncations and mix-ups, not forgeries.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kpipe {

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

// 16 lower-case hex digits, as checkpoints and logs print it.
std::string hash_hex(std::uint64_t hash);

}  // namespace kpipe
