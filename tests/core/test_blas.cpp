// Matrix products of bf16 operands (core/blas.hpp), every transposition, on strided submatrices, into float
// and into bf16, with and without beta, against the exact product of the same bf16 values in double.
//
// Tolerance, per element: the operands are bf16, so every product of two is exact in float (8 + 8
// significant bits); a float sum of k such terms is within k 2^-24 of the sum of their magnitudes m
// (the vendor BLAS adds in any order, and beta C is one more term). A bf16 output is then rounded once: at
// most u = 2^-8 of its exact value more (bf16 keeps 8 significant bits; u of the float error too, which the
// factor 2 absorbs). Summing in bf16 instead would be off by up to k u m and fail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kpipe/core/blas.hpp"

namespace kpipe {
namespace {

constexpr double bf16_roundoff = 0x1p-8, float_roundoff = 0x1p-24;

using Range = std::pair<std::int64_t, std::int64_t>;

// A rows x cols view of bf16 values (uniform in [-1, 1), rounded) inside a wider allocation: leading
// dimension cols + 3, as the attention heads' submatrices have.
struct Strided {
  View2<bf16> whole;
  decltype(Kokkos::subview(whole, Kokkos::ALL, Range())) view;
  std::vector<double> values;  // row-major rows x cols, the bf16 values exactly
  Strided(std::int64_t rows, std::int64_t cols, std::uint64_t seed)
      : whole("whole", rows, cols + 3), view(Kokkos::subview(whole, Kokkos::ALL, Range(1, cols + 1))) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto host = Kokkos::create_mirror_view(whole);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols + 3; ++j) host(i, j) = bf16(dist(gen));
    Kokkos::deep_copy(whole, host);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) values.push_back(double(float(host(i, j + 1))));
  }
};

template <class V> std::vector<double> host_values(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  std::vector<double> out;
  for (std::size_t i = 0; i < h.extent(0); ++i)
    for (std::size_t j = 0; j < h.extent(1); ++j) {
      if constexpr (std::is_same_v<typename V::non_const_value_type, bf16>)
        out.push_back(double(float(h(i, j))));
      else
        out.push_back(double(h(i, j)));
    }
  return out;
}

// C = alpha op(A) op(B) + beta C0, checked element by element.
template <class Out> void check_product(bool trans_a, bool trans_b, float beta) {
  const std::int64_t m = 7, n = 5, k = 70;  // k past a 64-wide block, not a multiple of anything
  const Strided a(trans_a ? k : m, trans_a ? m : k, 1), b(trans_b ? n : k, trans_b ? k : n, 2);
  View2<Out> c("c", m, n);
  auto c0 = Kokkos::create_mirror_view(c);
  std::mt19937_64 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<double> start;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      c0(i, j) = Out(dist(gen));
      start.push_back(double(float(c0(i, j))));
    }
  Kokkos::deep_copy(c, c0);
  const float alpha = 0.75f;
  const std::int64_t need = blas::workspace_elements<bf16, Out>(m, n, k);
  const View1<float> workspace("workspace", std::size_t(need));
  blas::gemm(ExecSpace(), trans_a ? "T" : "N", trans_b ? "T" : "N", alpha, a.view, b.view, beta, c,
             blas::Math::exact, workspace);
  const auto got = host_values(c);
  const std::int64_t ka = trans_a ? m : k, kb = trans_b ? k : n;  // row lengths of the stored operands
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double exact = beta * start[i * n + j], magnitude = std::abs(exact);
      for (std::int64_t l = 0; l < k; ++l) {
        const double x = trans_a ? a.values[l * ka + i] : a.values[i * ka + l];
        const double y = trans_b ? b.values[j * kb + l] : b.values[l * kb + j];
        exact += alpha * x * y;
        magnitude += std::abs(alpha * x * y);
      }
      double bound = (k + 2) * float_roundoff * magnitude;
      if constexpr (std::is_same_v<Out, bf16>) bound = bf16_roundoff * std::abs(exact) + 2 * bound;
      EXPECT_LE(std::abs(got[i * n + j] - exact), bound)
          << (trans_a ? "T" : "N") << (trans_b ? "T" : "N") << " beta " << beta << " element (" << i << ", " << j
          << "): got " << got[i * n + j] << ", exact " << exact;
    }
}

TEST(Blas, Bf16ProductsIntoFloatAreFloatAccurate) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) check_product<float>(ta, tb, beta);
}

TEST(Blas, Bf16ProductsIntoBf16AreRoundedOnce) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) check_product<bf16>(ta, tb, beta);
}

// beta = 0 ignores what C held, NaN included (the outputs of kpipe's products are uninitialized buffers).
// A strided batch: `count` matrices rows x cols, rows ld apart, matrix i at offset i * stride of one allocation
// (ld and stride past the matrices, as a block of rows of every head is), with uniform values in [-1, 1).
template <class E> struct Batch {
  View1<E> storage;
  blas::StridedBatch<E> batch;
  std::vector<double> values;  // storage's values, exactly
  Batch(std::int64_t count, std::int64_t rows, std::int64_t cols, std::uint64_t seed)
      : storage("batch", count * (rows * (cols + 2) + 5)), batch{nullptr, rows, cols, cols + 2, rows * (cols + 2) + 5,
                                                                  count} {
    batch.data = storage.data();
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto host = Kokkos::create_mirror_view(storage);
    for (std::size_t i = 0; i < host.extent(0); ++i) host(i) = E(dist(gen));
    Kokkos::deep_copy(storage, host);
    for (std::size_t i = 0; i < host.extent(0); ++i) values.push_back(double(float(host(i))));
  }
  double at(std::int64_t m, std::int64_t i, std::int64_t j) const {
    return values[std::size_t(m * batch.stride + i * batch.ld + j)];
  }
};

// C_i = op(A_i) op(B_i) + beta C_i for every matrix of a batch, against double sums, within float's bound; the
// gaps between matrices and past each row stay as they were.
template <class In> void check_batched(bool trans_a, bool trans_b, float beta) {
  const std::int64_t count = 3, m = 6, n = 5, k = 67;
  const Batch<In> a(count, trans_a ? k : m, trans_a ? m : k, 11), b(count, trans_b ? n : k, trans_b ? k : n, 12);
  Batch<float> c(count, m, n, 13);
  const std::vector<double> before = c.values;
  View1<float> workspace("workspace", blas::workspace_elements<In, float>(m, n, k));
  blas::gemm_strided_batched<In, float>(ExecSpace(), trans_a ? "T" : "N", trans_b ? "T" : "N", 1.0f,
                                        a.batch.as_const(), b.batch.as_const(), beta, c.batch, blas::Math::exact,
                                        workspace);
  auto after = Kokkos::create_mirror_view_and_copy(HostSpace(), c.storage);
  std::vector<bool> inside(before.size(), false);
  for (std::int64_t x = 0; x < count; ++x)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = beta * c.at(x, i, j), magnitude = std::abs(sum);
        for (std::int64_t l = 0; l < k; ++l) {
          const double term = (trans_a ? a.at(x, l, i) : a.at(x, i, l)) * (trans_b ? b.at(x, j, l) : b.at(x, l, j));
          sum += term;
          magnitude += std::abs(term);
        }
        const std::size_t e = std::size_t(x * c.batch.stride + i * c.batch.ld + j);
        inside[e] = true;
        EXPECT_NEAR(after(e), sum, 2 * (k + 1) * float_roundoff * magnitude) << "matrix " << x << " (" << i << ", "
                                                                             << j << ")";
      }
  for (std::size_t e = 0; e < before.size(); ++e)
    if (!inside[e]) {
      ASSERT_EQ(double(after(e)), before[e]) << "element " << e << " is outside every matrix";
    }
}

TEST(Blas, StridedBatchedProductsAreEachMatrixsProduct) {
  for (const bool trans_a : {false, true})
    for (const bool trans_b : {false, true}) {
      check_batched<float>(trans_a, trans_b, 0.0f);
      check_batched<float>(trans_a, trans_b, 1.0f);
      check_batched<bf16>(trans_a, trans_b, 0.0f);
      check_batched<bf16>(trans_a, trans_b, 1.0f);
    }
}

TEST(Blas, StridedBatchedProductsRefuseMismatchedBatches) {
  const Batch<float> a(2, 4, 3, 1), b(2, 3, 5, 2), other(3, 3, 5, 2);
  Batch<float> c(2, 4, 5, 3);
  auto product = [&](const char* trans_b, const Batch<float>& right) {
    blas::gemm_strided_batched<float, float>(ExecSpace(), "N", trans_b, 1.0f, a.batch.as_const(),
                                             right.batch.as_const(), 0.0f, c.batch);
  };
  EXPECT_THROW(product("N", other), std::invalid_argument);  // three matrices against two
  EXPECT_THROW(product("T", b), std::invalid_argument);      // 4 x 3 by 5 x 3
}

TEST(Blas, BetaZeroIgnoresTheOldOutput) {
  const Strided a(4, 9, 5), b(9, 3, 6);
  View2<bf16> c(uninitialized("c"), 4, 3);
  Kokkos::deep_copy(c, bf16::from_bits(0x7fc0u));  // NaN
  const View1<float> workspace("workspace", std::size_t(blas::workspace_elements<bf16, bf16>(4, 3, 9)));
  blas::gemm(ExecSpace(), "N", "N", 1.0f, a.view, b.view, 0.0f, c, blas::Math::exact, workspace);
  for (double x : host_values(c)) EXPECT_TRUE(std::isfinite(x));
}

TEST(Blas, WorkspaceIsWhatTheBuildNeeds) {
  const std::int64_t m = 7, n = 5, k = 11;
  if (blas::widens_bf16) {
    EXPECT_EQ((blas::workspace_elements<bf16, float>(m, n, k)), m * k + k * n);
    EXPECT_EQ((blas::workspace_elements<bf16, bf16>(m, n, k)), m * k + k * n + m * n);
  }
  EXPECT_EQ((blas::workspace_elements<float, float>(m, n, k)), 0);
  EXPECT_EQ((blas::workspace_elements<double, double>(m, n, k)), 0);
  if (blas::workspace_elements<bf16, bf16>(m, n, k) == 0)
    GTEST_SKIP() << "this build's bf16 products need no workspace";
  const Strided a(m, k, 7), b(k, n, 8);
  View2<bf16> c("c", m, n);
  const View1<float> short_one("workspace", std::size_t(blas::workspace_elements<bf16, bf16>(m, n, k) - 1));
  EXPECT_THROW(blas::gemm(ExecSpace(), "N", "N", 1.0f, a.view, b.view, 0.0f, c, blas::Math::exact, short_one),
               std::logic_error);
}

TEST(Blas, Tf32IsRefusedOffCudaAndCloseOnIt) {
  const std::int64_t m = 6, n = 4, k = 33;
  View2<float> a("a", m, k), b("b", k, n), c("c", m, n), exact("exact", m, n);
  Kokkos::deep_copy(a, 1.0f / 3.0f);
  Kokkos::deep_copy(b, 3.0f);
  blas::gemm(ExecSpace(), "N", "N", 1.0f, a, b, 0.0f, exact);
#if defined(KOKKOS_ENABLE_CUDA)
  blas::gemm(ExecSpace(), "N", "N", 1.0f, a, b, 0.0f, c, blas::Math::tf32);
  // TF32 keeps 10 significand bits of each operand: each term within 2^-10 of itself, and 1/3 is not exact.
  const auto got = host_values(c), want = host_values(exact);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2 * 0x1p-10 * std::abs(want[i]));
#else
  EXPECT_THROW(blas::gemm(ExecSpace(), "N", "N", 1.0f, a, b, 0.0f, c, blas::Math::tf32), std::invalid_argument);
#endif
}

}  // namespace
}  // namespace kpipe
