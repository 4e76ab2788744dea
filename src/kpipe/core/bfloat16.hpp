#pragma once
// bf16, the storage type of mixed-precision training: the upper half of an IEEE float (sign, the 8 exponent
// bits, 7 of the 23 significand bits). Same range as float, 8 significant bits: unit roundoff u = 2^-8 (a
// rounding moves a value by at most half a unit in its last place, 2^-8 of it just above a power of two).
// Nothing computes in bf16: kernels widen what they read to their accumulation type T, compute in T and
// narrow what they write, rounding once (docs/gpu.md, "Precision"). Both conversions are bit manipulations,
// the same bits on every host and device: float -> bf16 rounds to nearest, ties to even, as IEEE does
// (overflow to infinity, subnormals rounded like any other value, a NaN stays a NaN); bf16 -> float is exact.
// A type of its own rather than Kokkos' bhalf_t, which Kokkos 3.4 lacks.
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kpipe {

// float -> the 16 bits of the nearest bf16, ties to even.
KOKKOS_INLINE_FUNCTION std::uint16_t bf16_bits_of(float x) {
  std::uint32_t u;
  memcpy(&u, &x, sizeof u);
  // A NaN keeps its sign and becomes a quiet NaN: truncating its payload could leave the infinity pattern.
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);
  // Adding 0x7fff, plus 1 when the kept part is odd, carries into the kept half exactly when the dropped
  // half is above one half, or one half with an odd kept part. A carry out of the significand moves the
  // exponent up (the largest floats round to infinity, as they should).
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The float whose upper half is `bits` (exact).
KOKKOS_INLINE_FUNCTION float float_of_bf16_bits(std::uint16_t bits) {
  const std::uint32_t u = std::uint32_t(bits) << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

struct bf16 {
  std::uint16_t bits;  // no initializer: trivial, so a View of bf16 can skip its fill

  bf16() = default;
  // Conversions are explicit: a rounding is a decision a kernel writes down (narrow below), never a side effect.
  KOKKOS_INLINE_FUNCTION explicit bf16(float x) : bits(bf16_bits_of(x)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return float_of_bf16_bits(bits); }

  static KOKKOS_INLINE_FUNCTION bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
};
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16> && std::is_trivial_v<bf16>,
              "bf16 is two bytes that Views and MPI move as they are");

// The type kernels compute in for values stored in A: float for bf16, A itself otherwise.
template <class A> using accumulation_t = std::conditional_t<std::is_same_v<A, bf16>, float, A>;

// True when T and A differ: the layers' mixed-precision paths.
template <class T, class A> inline constexpr bool mixed_precision = !std::is_same_v<T, A>;

// A value stored in A, read in accumulation type T: the identity when A is T, exact for bf16.
template <class T, class A> KOKKOS_INLINE_FUNCTION T widen(A x) {
  if constexpr (std::is_same_v<A, bf16>) {
    return T(float(x));
  } else {
    return T(x);
  }
}

// A value computed in T, stored in A: the identity when A is T, rounded to nearest even for bf16 (from float
// only: double -> float -> bf16 would round twice).
template <class A, class T> KOKKOS_INLINE_FUNCTION A narrow(T x) {
  if constexpr (std::is_same_v<A, T>) {
    return x;
  } else {
    static_assert(std::is_same_v<A, bf16> && std::is_same_v<T, float>, "narrow: T -> T, or float -> bf16");
    return bf16(x);
  }
}

// The name of a storage type, for messages and traces.
template <class A> constexpr const char* type_name() {
  if constexpr (std::is_same_v<A, bf16>) return "bf16";
  else if constexpr (std::is_same_v<A, float>) return "float32";
  else if constexpr (std::is_same_v<A, double>) return "float64";
  else static_assert(sizeof(A) == 0, "type_name: a storage type kpipe has");
}

}  // namespace kpipe
