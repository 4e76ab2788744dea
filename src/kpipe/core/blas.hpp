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
#include <utility>

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
[[noreturn]] void refuse_batch(std::int64_t m, std::int64_t k, std::int64_t kb, std::int64_t n, std::int64_t c_rows,
                               std::int64_t c_cols, std::int64_t a_count, std::int64_t b_count, std::int64_t c_count);

// The element types and compute of one batched vendor product (CUDA builds; blas.cpp maps them to cuBLAS').
enum class BatchedTypes { f32, f32_tf32, f64, bf16_to_f32, bf16_to_bf16 };
struct BatchedOperand {
  const void* data;
  std::int64_t ld, stride;
};
// C_i = alpha op(A_i) op(B_i) + beta C_i for i < count, op(A_i) m x k: one cublasGemmStridedBatchedEx on the
// space's stream. alpha and beta point at doubles for f64, floats otherwise.
void gemm_strided_batched_vendor(const ExecSpace& space, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                                 std::int64_t k, const void* alpha, const BatchedOperand& a, const BatchedOperand& b,
                                 const void* beta, void* c, std::int64_t ldc, std::int64_t stride_c,
                                 std::int64_t count, BatchedTypes types);

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

// `count` row-major matrices of one shape, matrix i being rows x cols from data + i * stride, rows ld apart:
// e.g. one block of rows of every head of a [B*H, T, x] tensor.
template <class E> struct StridedBatch {
  E* data = nullptr;
  std::int64_t rows = 0, cols = 0, ld = 0, stride = 0, count = 0;
  StridedBatch<const E> as_const() const { return {data, rows, cols, ld, stride, count}; }
};

// C_i = alpha op(A_i) op(B_i) + beta C_i for every i < count, with gemm's element types, math and workspace
// rules. CUDA builds: one cuBLAS strided-batched call on the space's stream (tensor cores for bf16 and tf32).
// Host builds: gemm on each matrix in turn (the host BLAS already spreads one product over the cores).
// Either way a product's bits depend on its shapes and inputs only, so the same call gives the same bits.
template <class In, class Out>
void gemm_strided_batched(const ExecSpace& space, const char* trans_a, const char* trans_b, scalar_t<Out> alpha,
                          const StridedBatch<const In>& a, const StridedBatch<const In>& b, scalar_t<Out> beta,
                          const StridedBatch<Out>& c, Math math = Math::exact, const View1<float>& workspace = {}) {
  const bool ta = detail::transposed(trans_a), tb = detail::transposed(trans_b);
  const std::int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const std::int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (k != kb || c.rows != m || c.cols != n || a.count != c.count || b.count != c.count)
    detail::refuse_batch(m, k, kb, n, c.rows, c.cols, a.count, b.count, c.count);
  if (c.count == 0 || m == 0 || n == 0) return;
#if defined(KOKKOS_ENABLE_CUDA)
  (void)workspace;
  using detail::BatchedTypes;
  BatchedTypes types;
  if constexpr (std::is_same_v<In, bf16>) {
    types = std::is_same_v<Out, bf16> ? BatchedTypes::bf16_to_bf16 : BatchedTypes::bf16_to_f32;
  } else if constexpr (std::is_same_v<In, double>) {
    types = BatchedTypes::f64;
  } else {
    types = math == Math::tf32 ? BatchedTypes::f32_tf32 : BatchedTypes::f32;
  }
  const scalar_t<Out> alpha_value = alpha, beta_value = beta;
  const detail::BatchedOperand a_operand{a.data, a.ld, a.stride}, b_operand{b.data, b.ld, b.stride};
  detail::gemm_strided_batched_vendor(space, ta, tb, m, n, k, &alpha_value, a_operand, b_operand, &beta_value,
                                      c.data, c.ld, c.stride, c.count, types);
#else
  // A matrix as gemm takes it: its rows, each ld long, of which the first cols are the matrix (LayoutRight
  // with a leading dimension, which sends gemm to the vendor BLAS).
  auto matrix = [](auto* data, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    using E = std::remove_pointer_t<decltype(data)>;
    const Kokkos::View<E**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> whole(
        data, rows, rows > 1 ? ld : cols);
    return Kokkos::subview(whole, Kokkos::ALL, std::pair<std::int64_t, std::int64_t>(0, cols));
  };
  for (std::int64_t i = 0; i < c.count; ++i)
    gemm(space, trans_a, trans_b, alpha, matrix(a.data + i * a.stride, a.rows, a.cols, a.ld),
         matrix(b.data + i * b.stride, b.rows, b.cols, b.ld), beta,
         matrix(c.data + i * c.stride, c.rows, c.cols, c.ld), math, workspace);
#endif
}

}  // namespace kpipe::blas
