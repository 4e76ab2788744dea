#pragma once
// Whether every one of n host values is finite (checkpoints never hold a non-finite state).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kpipe {

// A non-finite float or double has every exponent bit set: tested on the bits and or-ed, with no early exit,
// the loop vectorizes (std::isfinite element by element took 0.45 s of a 1 GB checkpoint here).
template <class T> bool all_finite(const T* values, std::size_t n) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float or double");
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr Bits exponent = sizeof(T) == 4 ? Bits(0x7f800000u) : Bits(0x7ff0000000000000ull);
  Bits non_finite = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, values + i, sizeof bits);
    non_finite |= Bits((bits & exponent) == exponent);
  }
  return non_finite == 0;
}

}  // namespace kpipe
