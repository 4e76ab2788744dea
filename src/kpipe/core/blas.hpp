#pragma once
// Matrix products. Kokkos Kernels 4.x takes the execution space first; 3.x (Debian 12) does not.
// Every kpipe call site passes the space, and this shim drops it where the library cannot take it.
#include <KokkosBlas3_gemm.hpp>

#include "kpipe/core/tensor.hpp"

namespace kpipe::blas {

// C = alpha * op(A) * op(B) + beta * C, op = 'N' (as is) or 'T' (transposed).
template <class A, class B, class C>
void gemm(const ExecSpace& space, const char* trans_a, const char* trans_b,
          typename C::const_value_type alpha, const A& a, const B& b,
          typename C::const_value_type beta, const C& c) {
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40000
  KokkosBlas::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#else
  (void)space;
  KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
#endif
}

// Floating-point operations of one gemm of (m x k) by (k x n).
constexpr double gemm_flops(std::int64_t m, std::int64_t n, std::int64_t k) { return 2.0 * m * n * k; }

}  // namespace kpipe::blas
