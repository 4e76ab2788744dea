#pragma once
// Kokkos 3.x keeps its math functions in Kokkos::Experimental; 4.x moved them to Kokkos::. Kernels call
// kpipe::math::exp etc., which resolve to the device-safe versions either way (no std:: in kernels).
#include <Kokkos_Core.hpp>

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
}  // namespace kpipe::math
