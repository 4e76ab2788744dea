#pragma once
// A hash of a buffer's bytes computed where the buffer lives (one Kokkos reduction, no host copy), with a
// result that does not depend on the order the terms are added in: element i of the buffer contributes
// mix(key_i, bits_i), and the terms are summed modulo 2^64, which is exact in any order, so any thread count,
// backend or reduction tree gives the same bits. mix is a bijection of the element's bits for a given key, so
// changing any one element always changes the sum; several changes cancel with probability 2^-64.
//
// Keys place each element in a larger whole: a model's hash is the sum of its parts' hashes when every
// element's key is its position in the whole model (runtime/replica_check.hpp), on any layout.
// (XXH64, core/hash.hpp, hashes a host copy's bytes in order: the file format's, not this.)
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>

#include "kpipe/core/tensor.hpp"

namespace kpipe {

// The term of the element whose bits are `bits` (its bytes as an unsigned integer) at key `key`: the bits
// xor a multiple of the key, then a 64-bit finalizer (xor-shift and odd multiplications: each step a bijection).
KOKKOS_INLINE_FUNCTION std::uint64_t mix_element(std::uint64_t key, std::uint64_t bits) {
  std::uint64_t x = bits ^ (key * 0x9e3779b97f4a7c15ull);
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

// An element's bytes as an unsigned integer of its size (2, 4 or 8 bytes).
template <class E> KOKKOS_INLINE_FUNCTION std::uint64_t element_bits(const E& value) {
  static_assert(sizeof(E) == 2 || sizeof(E) == 4 || sizeof(E) == 8, "element_bits: 2, 4 or 8 bytes");
  if constexpr (sizeof(E) == 2) {
    std::uint16_t b;
    memcpy(&b, &value, sizeof b);
    return b;
  } else if constexpr (sizeof(E) == 4) {
    std::uint32_t b;
    memcpy(&b, &value, sizeof b);
    return b;
  } else {
    std::uint64_t b;
    memcpy(&b, &value, sizeof b);
    return b;
  }
}

// Sum over i in [0, n) of mix_element(first_key + i * key_step, bits of data[i]), modulo 2^64; data in
// MemSpace. Waits for the result (the reduction runs on `space` after the work queued there).
template <class E>
std::uint64_t order_free_hash(const ExecSpace& space, const E* data, std::int64_t n, std::uint64_t first_key,
                              std::uint64_t key_step);

// The same hash of `data`, copying it to `copy` in the same pass (one read of the data where there were two: a
// checkpoint's snapshot). Both in memory that `space` reaches (host builds: any host memory).
template <class E>
std::uint64_t order_free_hash_copy(const ExecSpace& space, const E* data, E* copy, std::int64_t n,
                                   std::uint64_t first_key, std::uint64_t key_step);

}  // namespace kpipe
