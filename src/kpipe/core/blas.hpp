#pragma once
// Matrix products, C = alpha op(A) op(B) + beta C with op = 'N' (as is) or 'T' (transposed), for the element
// types {float, float, float}, {double, double, double}, {bf16, bf16, float} and {bf16, bf16, bf16}.
//  - float and double, exact: Kokkos Kernels (the vendor BLAS: OpenBLAS on hosts, cuBLAS on CUDA builds).
//    Kokkos Kernels 4.x takes the execution space first; 3.x (Debian 12) does not, and this shim drops it.
//  - float, tf32 (CUDA builds only): cuBLAS with TF32 tensor-core compute (operands rounded to 10 significand
//    bits, fp32 accumulation).
//  - bf16 operands: fp32 accumulation; a bf16 output is rounded once, after beta C (widened) is added in
//    fp32. CUDA builds: cublasGemmEx on the execution space's stream. Host builds: the BLAS' own bf16
//    product (cblas_sbgemm) where it exports one (build::vendor_bf16_gemm), otherwise the operands widened
//    to float in a caller's workspace and the float product.
// The bf16 and tf32 products need LayoutRight matrices (a leading dimension, as subviews have).
#include <KokkosBlas3_gemm.hpp>

#include <cstdint>
#include <type_traits>

#include "kpipe/build_config.hpp"
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe::blas {

// How a float product runs: exact fp32 arithmetic, or TF32 tensor cores (CUDA builds; a host build refuses
// it). Products with bf16 operands accumulate in fp32 either way.
enum class Math { exact, tf32 };

// The type of alpha and beta for a product into C: float for a bf16 output.
template <class C> using scalar_t = std::conditional_t<std::is_same_v<C, bf16>, float, C>;

// True where a product of bf16 operands widens them into a workspace: host builds without a vendor bf16 gemm.
inline constexpr bool widens_bf16 =
    Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible && !build::vendor_bf16_gemm;
// True where a bf16 output goes through a float workspace: host builds (cblas_sbgemm writes float only).
inline constexpr bool stages_bf16_output = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

// Floats of workspace one product of an (m x k) by a (k x n) matrix into (m x n) needs, for operands of
// type In and an output of type Out: 0 but for bf16 operands on host builds (the widened operands, and the
// float output before it is rounded to bf16). A caller sizes one workspace for all its products with it.
template <class In, class Out> constexpr std::int64_t workspace_elements(std::int64_t m, std::int64_t n,
                                                                         std::int64_t k) {
  if constexpr (!std::is_same_v<In, bf16>) {
    return 0;
  } else {
    std::int64_t e = widens_bf16 ? m * k + k * n : 0;
    if (std::is_same_v<Out, bf16> && stages_bf16_output) e += m * n;
    return e;
  }
}

// Floating-point operations of one gemm of (m x k) by (k x n).
constexpr double gemm_flops(std::int64_t m, std::int64_t n, std::int64_t k) { return 2.0 * m * n * k; }

namespace detail {

// A row-major matrix as BLAS libraries take it: rows x cols, row i starting at data + i * ld.
template <class E> struct Matrix {
  E* data;
  std::int64_t rows, cols, ld;
};

template <class V> Matrix<typename V::value_type> matrix_of(const V& v) {
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
                "bf16 and tf32 products take LayoutRight matrices");
  const std::int64_t rows = v.extent(0), cols = v.extent(1);
  // A matrix of one row (or none) may report any stride: BLAS only needs ld >= cols.
  const std::int64_t ld = rows > 1 ? std::int64_t(v.stride(0)) : (cols > 0 ? cols : 1);
  return {v.data(), rows, cols, ld};
}

// Compiled in blas.cpp. trans_*: op = transposed.
void gemm_bf16(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const bf16>& a,
               const Matrix<const bf16>& b, float beta, const Matrix<float>& c, const View1<float>& workspace);
void gemm_bf16(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const bf16>& a,
               const Matrix<const bf16>& b, float beta, const Matrix<bf16>& c, const View1<float>& workspace);
void gemm_tf32(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const float>& a,
               const Matrix<const float>& b, float beta, const Matrix<float>& c);

[[noreturn]] void refuse_tf32(const char* why);  // std::invalid_argument

inline bool transposed(const char* op) { return op[0] == 'T' || op[0] == 't'; }

}  // namespace detail

// C = alpha op(A) op(B) + beta C. math applies to float products; workspace (float, in MemSpace) to bf16
// operands, at least workspace_elements<bf16, C's type>(m, n, k) long where that is not 0.
template <class AV, class BV, class CV>
void gemm(const ExecSpace& space, const char* trans_a, const char* trans_b,
          scalar_t<typename CV::non_const_value_type> alpha, const AV& a, const BV& b,
          scalar_t<typename CV::non_const_value_type> beta, const CV& c, Math math = Math::exact,
          const View1<float>& workspace = {}) {
  using In = typename AV::non_const_value_type;
  using Out = typename CV::non_const_value_type;
  static_assert(std::is_same_v<In, typename BV::non_const_value_type>, "gemm: both operands of one type");
  if constexpr (std::is_same_v<In, bf16>) {
    static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, bf16>, "gemm: bf16 operands give float or bf16");
    const detail::Matrix<const bf16> ma = detail::matrix_of(typename AV::const_type(a)),
                                     mb = detail::matrix_of(typename BV::const_type(b));
    detail::gemm_bf16(space, detail::transposed(trans_a), detail::transposed(trans_b), alpha, ma, mb, beta,
                      detail::matrix_of(c), workspace);
  } else {
    static_assert(std::is_same_v<In, Out>, "gemm: float and double products keep their type");
    if (math == Math::tf32) {
      if constexpr (std::is_same_v<Out, float> && std::is_same_v<typename AV::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename BV::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename CV::array_layout, Kokkos::LayoutRight>) {
        detail::gemm_tf32(space, detail::transposed(trans_a), detail::transposed(trans_b), alpha,
                          detail::matrix_of(typename AV::const_type(a)), detail::matrix_of(typename BV::const_type(b)),
                          beta, detail::matrix_of(c));
        return;
      } else {
        detail::refuse_tf32("tf32 products take float LayoutRight matrices");
      }
    }
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40000
    KokkosBlas::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#else
    (void)space;
    KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
#endif
  }
}

}  // namespace kpipe::blas
