#pragma once
// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11). A value is a pure function of
// (key, counter), so element i of a parameter gets the same number whichever rank, stage or device
// computes it: this is what makes initialization independent of the pipeline layout (docs/architecture.md, property 1).
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string_view>

#include "kpipe/core/math.hpp"

namespace kpipe::rng {

struct Key {
  std::uint32_t k0, k1;
};

// FNV-1a, 64-bit: a stable hash of parameter names (std::hash is not stable across implementations).
constexpr std::uint64_t hash_name(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// SplitMix64 finalizer, used only to fold the key's parts together.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The key of a stream: (seed, a, b, name), e.g. (seed, global layer index, 0, "attn/qkv/weight") for
// initialization or (seed, step, micro-batch, "sampler") for data.
constexpr Key make_key(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::string_view name) {
  std::uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ (a + 0x632be59bd9b4e019ull));
  h = mix64(h ^ (b + 0x85157af5ull));
  h = mix64(h ^ hash_name(name));
  return {static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32)};
}

struct Block {
  std::uint32_t v[4];
};

KOKKOS_INLINE_FUNCTION void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// Philox-4x32 with 10 rounds on counter (c, 0) under key k.
KOKKOS_INLINE_FUNCTION Block philox(Key k, std::uint64_t c) {
  std::uint32_t x0 = static_cast<std::uint32_t>(c), x1 = static_cast<std::uint32_t>(c >> 32), x2 = 0, x3 = 0;
  std::uint32_t k0 = k.k0, k1 = k.k1;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, x0, hi0, lo0);
    mulhilo(0xCD9E8D57u, x2, hi1, lo1);
    const std::uint32_t y0 = hi1 ^ x1 ^ k0, y1 = lo1, y2 = hi0 ^ x3 ^ k1, y3 = lo0;
    x0 = y0; x1 = y1; x2 = y2; x3 = y3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{x0, x1, x2, x3}};
}

// Uniform in (0, 1], 24 bits of resolution, exact in float and double alike.
KOKKOS_INLINE_FUNCTION double to_unit(std::uint32_t x) { return ((x >> 8) + 1) * (1.0 / 16777216.0); }

// Standard normal number for counter c (Box-Muller on two words of one Philox block).
KOKKOS_INLINE_FUNCTION double normal(Key k, std::uint64_t c) {
  const Block b = philox(k, c);
  const double u1 = to_unit(b.v[0]), u2 = to_unit(b.v[1]);
  return math::sqrt(-2.0 * math::log(u1)) * math::cos(6.283185307179586 * u2);
}

// A uniform 64-bit integer for counter c.
KOKKOS_INLINE_FUNCTION std::uint64_t bits64(Key k, std::uint64_t c) {
  const Block b = philox(k, c);
  return (static_cast<std::uint64_t>(b.v[0]) << 32) | b.v[1];
}

}  // namespace kpipe::rng
