#pragma once
// Kokkos 3.x keeps its math functions in Kokkos::Experimental; 4.x moved them to Kokkos::. Kernels call
// kpipe::math::exp etc., which resolve to the device-safe versions either way (no std:: in kernels).
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>

namespace kpipe::math {
#if KOKKOS_VERSION >= 40000
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::isfinite;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
using Kokkos::cos;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::isfinite;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
using Kokkos::Experimental::cos;
#endif

template <class T> KOKKOS_INLINE_FUNCTION T max(T a, T b) { return a > b ? a : b; }
template <class T> KOKKOS_INLINE_FUNCTION T min(T a, T b) { return a < b ? a : b; }

// exp for elementwise kernels. In float: Cody-Waite range reduction and a degree-7 polynomial, within
// 1 ulp of exp over the float range (tests/core/test_math.cpp), with no call and no branch, so that the
// loops around it vectorize (the library expf is a call per element: it dominated the GeLU kernels).
// Below -87.33 (where exp leaves the normal floats) it returns about 1.2e-38; past float's range, +inf.
// In double (gradient checks): the library exp.
KOKKOS_INLINE_FUNCTION float fast_exp(float x) {
  x = min(max(x, -87.33f), 89.0f);
  // round(x / ln 2) by the 1.5 * 2^23 trick: plain arithmetic, which vectorizes on any SIMD level
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-06f;  // x - n ln 2, in two parts
  float p = 1.98412698412698413e-04f;  // 1/7!, then Horner down to 1
  p = p * r + 1.38888888888888889e-03f;
  p = p * r + 8.33333333333333333e-03f;
  p = p * r + 4.16666666666666667e-02f;
  p = p * r + 1.66666666666666667e-01f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n, n in [-126, 128], as 2^h 2^(n-h) built from exponent fields (h = n/2 keeps both normal), so that
  // p 2^128 still comes out finite where exp(x) is below float's largest value.
  const std::int32_t whole = static_cast<std::int32_t>(n), half = whole >> 1;
  const std::int32_t bits_low = (half + 127) << 23, bits_high = (whole - half + 127) << 23;
  float low, high;
  memcpy(&low, &bits_low, sizeof low);
  memcpy(&high, &bits_high, sizeof high);
  return p * low * high;
}
KOKKOS_INLINE_FUNCTION double fast_exp(double x) { return exp(x); }
}  // namespace kpipe::math
