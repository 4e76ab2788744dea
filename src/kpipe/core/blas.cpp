// The products blas.hpp cannot leave to Kokkos Kernels: bf16 operands and TF32 compute.
#include "kpipe/core/blas.hpp"

#include <fmt/format.h>

#include <KokkosKernels_config.h>

#include <stdexcept>

#include "kpipe/core/fence.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#if !defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
#error "kpipe's CUDA build needs Kokkos Kernels built with its cuBLAS TPL (KokkosKernels_ENABLE_TPL_CUBLAS=ON)"
#endif
#include <cublas_v2.h>

#include <KokkosBlas_tpl_spec.hpp>
#elif KPIPE_HAVE_VENDOR_BF16_GEMM
#include <cblas.h>
#endif

namespace kpipe::blas::detail {

void refuse_tf32(const char* why) { throw std::invalid_argument(fmt::format("blas::gemm: {}", why)); }

void refuse_batch(std::int64_t m, std::int64_t k, std::int64_t kb, std::int64_t n, std::int64_t c_rows,
                  std::int64_t c_cols, std::int64_t a_count, std::int64_t b_count, std::int64_t c_count) {
  throw std::invalid_argument(fmt::format("blas::gemm_strided_batched: op(A) is {} x {}, op(B) {} x {}, C {} x {}; "
                                          "counts {}, {}, {}",
                                          m, k, kb, n, c_rows, c_cols, a_count, b_count, c_count));
}

namespace {

// op(A) is m x k, op(B) k x n, C m x n.
struct Shape {
  std::int64_t m, n, k;
};

template <class EA, class EB, class EC>
Shape shape_of(bool trans_a, bool trans_b, const Matrix<EA>& a, const Matrix<EB>& b, const Matrix<EC>& c) {
  const std::int64_t m = trans_a ? a.cols : a.rows, k = trans_a ? a.rows : a.cols;
  const std::int64_t kb = trans_b ? b.cols : b.rows, n = trans_b ? b.rows : b.cols;
  if (k != kb || c.rows != m || c.cols != n)
    throw std::invalid_argument(fmt::format("blas::gemm: op(A) is {} x {}, op(B) {} x {}, C {} x {}", m, k, kb, n,
                                            c.rows, c.cols));
  return {m, n, k};
}

}  // namespace

#if defined(KOKKOS_ENABLE_CUDA)

// One cublasGemmEx on the space's stream. cuBLAS is column-major: the row-major C = op(A) op(B) is, read
// column-major, C^T = op(B)^T op(A)^T, whose operands are B's and A's storage as they are with the same
// transposition flags. The handle is Kokkos Kernels' (its fp32 and fp64 products use the same one, on the
// same stream protocol: set for the call, reset after), created at first use and destroyed when Kokkos
// finalizes; kpipe keeps no handle of its own.
void gemm_ex(const ExecSpace& space, bool trans_a, bool trans_b, const Shape& s, float alpha, const void* a,
             std::int64_t lda, const void* b, std::int64_t ldb, cudaDataType in_type, float beta, void* c,
             std::int64_t ldc, cudaDataType out_type, cublasComputeType_t compute) {
  if (s.m == 0 || s.n == 0) return;
  auto& blas = KokkosBlas::Impl::CudaBlasSingleton::singleton();
  auto check = [](cublasStatus_t status, const char* call) {
    if (status != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(fmt::format("blas::gemm: {} failed: cuBLAS status {}", call, int(status)));
  };
  check(cublasSetStream(blas.handle, space.cuda_stream()), "cublasSetStream");
  const cublasStatus_t status =
      cublasGemmEx(blas.handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(s.n),
                   int(s.m), int(s.k), &alpha, b, in_type, int(ldb), a, in_type, int(lda), &beta, c, out_type, int(ldc),
                   compute, CUBLAS_GEMM_DEFAULT);
  check(cublasSetStream(blas.handle, nullptr), "cublasSetStream");
  check(status, "cublasGemmEx");
}

// The batched product, with gemm_ex's column-major reading (B's storage first) and the same handle protocol.
void gemm_strided_batched_vendor(const ExecSpace& space, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                                 std::int64_t k, const void* alpha, const BatchedOperand& a, const BatchedOperand& b,
                                 const void* beta, void* c, std::int64_t ldc, std::int64_t stride_c,
                                 std::int64_t count, BatchedTypes types) {
  cudaDataType in = CUDA_R_32F, out = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  switch (types) {
    case BatchedTypes::f32: break;
    case BatchedTypes::f32_tf32: compute = CUBLAS_COMPUTE_32F_FAST_TF32; break;
    case BatchedTypes::f64: in = out = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F; break;
    case BatchedTypes::bf16_to_f32: in = CUDA_R_16BF; break;
    case BatchedTypes::bf16_to_bf16: in = out = CUDA_R_16BF; break;
  }
  auto& blas = KokkosBlas::Impl::CudaBlasSingleton::singleton();
  auto check = [](cublasStatus_t status, const char* call) {
    if (status != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(
          fmt::format("blas::gemm_strided_batched: {} failed: cuBLAS status {}", call, int(status)));
  };
  check(cublasSetStream(blas.handle, space.cuda_stream()), "cublasSetStream");
  const cublasStatus_t status = cublasGemmStridedBatchedEx(
      blas.handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k),
      alpha, b.data, in, int(b.ld), (long long)b.stride, a.data, in, int(a.ld), (long long)a.stride, beta, c, out,
      int(ldc), (long long)stride_c, int(count), compute, CUBLAS_GEMM_DEFAULT);
  check(cublasSetStream(blas.handle, nullptr), "cublasSetStream");
  check(status, "cublasGemmStridedBatchedEx");
}

void gemm_bf16(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const bf16>& a,
               const Matrix<const bf16>& b, float beta, const Matrix<float>& c, const View1<float>&) {
  gemm_ex(space, trans_a, trans_b, shape_of(trans_a, trans_b, a, b, c), alpha, a.data, a.ld, b.data, b.ld, CUDA_R_16BF,
          beta, c.data, c.ld, CUDA_R_32F, CUBLAS_COMPUTE_32F);
}

void gemm_bf16(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const bf16>& a,
               const Matrix<const bf16>& b, float beta, const Matrix<bf16>& c, const View1<float>&) {
  gemm_ex(space, trans_a, trans_b, shape_of(trans_a, trans_b, a, b, c), alpha, a.data, a.ld, b.data, b.ld, CUDA_R_16BF,
          beta, c.data, c.ld, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
}

void gemm_tf32(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const float>& a,
               const Matrix<const float>& b, float beta, const Matrix<float>& c) {
  gemm_ex(space, trans_a, trans_b, shape_of(trans_a, trans_b, a, b, c), alpha, a.data, a.ld, b.data, b.ld, CUDA_R_32F,
          beta, c.data, c.ld, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32);
}

#else  // host builds

namespace {

using Packed = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The next `rows x cols` floats of the workspace, as a packed matrix.
Packed carve(const View1<float>& workspace, std::int64_t& used, std::int64_t rows, std::int64_t cols) {
  const Packed p(workspace.data() + used, rows, cols);
  used += rows * cols;
  return p;
}

void require_workspace(const View1<float>& workspace, std::int64_t needed) {
  if (std::int64_t(workspace.extent(0)) < needed)
    throw std::logic_error(fmt::format("blas::gemm: this bf16 product needs a workspace of {} floats, got {} "
                                       "(blas::workspace_elements)",
                                       needed, workspace.extent(0)));
}

// to[i, j] = float(from[i, j]), exact. Host code: a row per work item, its columns a vectorized loop.
void widen_into(const ExecSpace& space, const Matrix<const bf16>& from, const Packed& to) {
  const bf16* const data = from.data;
  const std::int64_t ld = from.ld, cols = from.cols;
  Kokkos::parallel_for("kpipe::blas::gemm::widen", range(space, from.rows), KOKKOS_LAMBDA(std::int64_t i) {
    const bf16* KOKKOS_RESTRICT source = data + i * ld;
    float* KOKKOS_RESTRICT target = &to(i, 0);
    for (std::int64_t j = 0; j < cols; ++j) target[j] = float(source[j]);
  });
}

// to[i, j] = bf16(from[i, j]), rounded once.
void narrow_into(const ExecSpace& space, const Packed& from, const Matrix<bf16>& to) {
  bf16* const data = to.data;
  const std::int64_t ld = to.ld, cols = to.cols;
  Kokkos::parallel_for("kpipe::blas::gemm::narrow", range(space, to.rows), KOKKOS_LAMBDA(std::int64_t i) {
    const float* KOKKOS_RESTRICT source = &from(i, 0);
    bf16* KOKKOS_RESTRICT target = data + i * ld;
    for (std::int64_t j = 0; j < cols; ++j) target[j] = bf16(source[j]);
  });
}

Matrix<const bf16> as_const(const Matrix<bf16>& m) { return {m.data, m.rows, m.cols, m.ld}; }

// C (float, written where c points with leading dimension ldc) = alpha op(A) op(B) + beta C.
void float_product(const ExecSpace& space, bool trans_a, bool trans_b, const Shape& s, float alpha,
                   const Matrix<const bf16>& a, const Matrix<const bf16>& b, float beta, float* c, std::int64_t ldc,
                   const View1<float>& workspace, std::int64_t& used) {
#if KPIPE_HAVE_VENDOR_BF16_GEMM
  (void)workspace;
  (void)used;
  named_fence(space, "kpipe::blas::gemm_bf16: the host BLAS reads what the space wrote");  // the BLAS runs outside Kokkos: what the space's kernels wrote into C (beta) must be there
  static_assert(sizeof(bf16) == sizeof(bfloat16), "cblas_sbgemm's bfloat16 is bf16's 16 bits");
  cblas_sbgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(s.m),
               blasint(s.n), blasint(s.k), alpha, reinterpret_cast<const bfloat16*>(a.data), blasint(a.ld),
               reinterpret_cast<const bfloat16*>(b.data), blasint(b.ld), beta, c, blasint(ldc));
#else
  const Packed wa = carve(workspace, used, a.rows, a.cols), wb = carve(workspace, used, b.rows, b.cols);
  widen_into(space, a, wa);
  widen_into(space, b, wb);
  const Packed whole(c, s.m, ldc);  // C's rows, each ldc long: their first n columns are C
  const auto cv = Kokkos::subview(whole, Kokkos::ALL, std::pair<std::int64_t, std::int64_t>(0, s.n));
  gemm(space, trans_a ? "T" : "N", trans_b ? "T" : "N", alpha, wa, wb, beta, cv);
#endif
}

}  // namespace

void gemm_bf16(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const bf16>& a,
               const Matrix<const bf16>& b, float beta, const Matrix<float>& c, const View1<float>& workspace) {
  const Shape s = shape_of(trans_a, trans_b, a, b, c);
  if (s.m == 0 || s.n == 0) return;
  require_workspace(workspace, workspace_elements<bf16, float>(s.m, s.n, s.k));
  std::int64_t used = 0;
  float_product(space, trans_a, trans_b, s, alpha, a, b, beta, c.data, c.ld, workspace, used);
}

void gemm_bf16(const ExecSpace& space, bool trans_a, bool trans_b, float alpha, const Matrix<const bf16>& a,
               const Matrix<const bf16>& b, float beta, const Matrix<bf16>& c, const View1<float>& workspace) {
  const Shape s = shape_of(trans_a, trans_b, a, b, c);
  if (s.m == 0 || s.n == 0) return;
  require_workspace(workspace, workspace_elements<bf16, bf16>(s.m, s.n, s.k));
  // The product lands in float, beta C added there, then is rounded once into C.
  std::int64_t used = 0;
  const Packed staged = carve(workspace, used, s.m, s.n);
  if (beta != 0.0f) widen_into(space, as_const(c), staged);
  float_product(space, trans_a, trans_b, s, alpha, a, b, beta, staged.data(), s.n, workspace, used);
  narrow_into(space, staged, c);
}

void gemm_tf32(const ExecSpace&, bool, bool, float, const Matrix<const float>&, const Matrix<const float>&, float,
               const Matrix<float>&) {
  refuse_tf32("tf32 products need a CUDA build (TF32 is a tensor-core format)");
}

#endif

}  // namespace kpipe::blas::detail
