#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kpipe/core/blas.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/nn/attention.hpp"
#include "support/gradcheck.hpp"
#include "support/precision.hpp"

namespace kpipe::nn {
namespace {

// One attention layer's buffers for a shape, with random q|k|v input.
template <class T, KernelPath P = default_kernel_path> struct Attention {
  AttentionShape shape;
  View2<T> qkv, out;
  AttentionStash<T> stash;
  AttentionWork<T> work;

  explicit Attention(const AttentionShape& s, std::uint64_t seed = 1)
      : shape(s),
        qkv("qkv", s.rows(), 3 * s.channels()),
        out("out", s.rows(), s.channels()),
        stash(allocate_stash<T>(s)),
        work(allocate_work<T>(s)) {
    // Wide enough that the softmax is far from uniform.
    test::fill_uniform(qkv, seed, -2.0, 2.0);
  }
  void forward() { attention_forward<T, T, P>(ExecSpace(), shape, qkv, stash, work, out); }
  void backward(const View2<T>& dout, const View2<T>& dqkv) {
    attention_backward_input<T, T, P>(ExecSpace(), shape, stash, work, dout, dqkv);
  }
};

// Naive host attention, straight from the definition: out[b*T+i, h*hd+d], and per head and query row the
// softmax's statistics: the max of the scaled scores and 1 / the sum of exp(scaled - max) (at (b*H+h)*T+i).
struct Reference {
  std::vector<double> out, row_max, inv_sum;
};
Reference reference_attention(const AttentionShape& s, const View2<double>& qkv) {
  auto x = Kokkos::create_mirror_view_and_copy(HostSpace(), qkv);
  const int B = s.batch, T = s.seq, H = s.heads, D = s.head_dim, C = s.channels();
  const std::size_t rows = std::size_t(B) * H * T;
  Reference ref{std::vector<double>(std::size_t(B) * T * C), std::vector<double>(rows), std::vector<double>(rows)};
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> z(i + 1), p(i + 1);
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += x(b * T + i, h * D + d) * x(b * T + j, C + h * D + d);
          z[j] = dot / std::sqrt(double(D));
        }
        const double m = *std::max_element(z.begin(), z.end());
        double norm = 0;
        for (int j = 0; j <= i; ++j) norm += p[j] = std::exp(z[j] - m);
        ref.row_max[(std::size_t(b) * H + h) * T + i] = m;
        ref.inv_sum[(std::size_t(b) * H + h) * T + i] = 1 / norm;
        for (int d = 0; d < D; ++d) {
          double o = 0;
          for (int j = 0; j <= i; ++j) o += p[j] / norm * x(b * T + j, 2 * C + h * D + d);
          ref.out[(std::size_t(b) * T + i) * C + h * D + d] = o;
        }
      }
  return ref;
}

// Shapes under test: the brief's tiny one, and one longer than a block of query rows (the products run a block
// of attention_block_rows rows at a time; 131 = 128 + 3 leaves a ragged last block).
const AttentionShape tiny{2, 5, 2, 3};
constexpr int long_seq_rows = 131;
const AttentionShape long_seq{1, long_seq_rows, 2, 4};

void expect_forward_matches_reference(const AttentionShape& shape) {
  Attention<double> a(shape);
  a.forward();
  const Reference ref = reference_attention(shape, a.qkv);
  auto out = Kokkos::create_mirror_view_and_copy(HostSpace(), a.out);
  auto softmax = Kokkos::create_mirror_view_and_copy(HostSpace(), a.stash.softmax);
  ASSERT_EQ(out.span(), ref.out.size());
  for (std::size_t i = 0; i < ref.out.size(); ++i) EXPECT_NEAR(out.data()[i], ref.out[i], 1e-12) << "out " << i;
  ASSERT_EQ(softmax.span(), 2 * ref.row_max.size());
  for (std::size_t r = 0; r < ref.row_max.size(); ++r) {
    EXPECT_NEAR(softmax.data()[2 * r], ref.row_max[r], 1e-12) << "row max " << r;
    EXPECT_NEAR(softmax.data()[2 * r + 1], ref.inv_sum[r], 1e-12 * ref.inv_sum[r]) << "1 / sum " << r;
  }
}

static_assert(long_seq_rows > attention_block_rows, "long_seq must span more than one block of query rows");

TEST(Attention, ForwardMatchesNaiveReference) { expect_forward_matches_reference(tiny); }
TEST(Attention, ForwardMatchesNaiveReferenceOverSeveralBlocks) { expect_forward_matches_reference(long_seq); }

// What a micro-batch keeps (q|k|v and two statistics per row) and the work buffers (a block of query rows at a
// time) grow linearly with the sequence: doubling T past one block doubles both exactly.
TEST(Attention, MemoryIsLinearInTheSequenceLength) {
  const AttentionShape one{2, 1024, 16, 64}, two{2, 2048, 16, 64};
  auto stash = [](const AttentionShape& s) { return 3 * s.rows() * s.channels() + attention_softmax_elements(s); };
  EXPECT_EQ(stash(two), 2 * stash(one));
  const AttentionWorkElements w1 = attention_work_elements<float, bf16>(one);
  const AttentionWorkElements w2 = attention_work_elements<float, bf16>(two);
  EXPECT_EQ(w2.a, 2 * w1.a);
  EXPECT_EQ(w2.t, 2 * w1.t);
  // And the allocations are what the counts say.
  const AttentionShape small{1, 300, 2, 4};
  const auto s = allocate_stash<double>(small);
  const auto w = allocate_work<double>(small);
  EXPECT_EQ(std::int64_t(s.qkv.size() + s.softmax.size()), stash(small));
  const AttentionWorkElements e = attention_work_elements<double, double>(small);
  EXPECT_EQ(std::int64_t(w.q.size() + w.k.size() + w.v.size() + w.o.size() + w.dq.size()), e.a);
  EXPECT_EQ(std::int64_t(w.dk.size() + w.dv.size() + w.scores.size() + w.dprobs.size()), e.t);
  EXPECT_EQ(w.scores.extent(1), std::size_t(attention_block_rows));
}

// NaN in every work buffer (scratch between the passes: nothing the backward reads may come from them).
template <class T, class A> void poison_work(const AttentionWork<T, A>& work) {
  const auto poison = [](const auto& view) {
    using V = typename std::decay_t<decltype(view)>::value_type;
    if (view.size() > 0) Kokkos::deep_copy(view, V(std::numeric_limits<float>::quiet_NaN()));
  };
  // One call each (nvcc's front end misreads a braced list of Views in a template's range-for).
  poison(work.q), poison(work.k), poison(work.v), poison(work.o), poison(work.dq), poison(work.probs);
  poison(work.dscores), poison(work.dk), poison(work.dv), poison(work.scores), poison(work.dprobs);
}

// The backward recomputes each block's probabilities from q k^T and the forward's statistics: the same product
// and the same expression, so the same bits. With one block of query rows, the work buffers end the forward
// holding its probabilities and the backward holding its recomputed ones.
template <class T, class A, KernelPath P> void expect_recomputed_probabilities_have_the_forwards_bits() {
  const AttentionShape shape{2, 100, 3, 8};
  static_assert(100 <= attention_block_rows, "one block of query rows");
  ExecSpace space;
  View2<A> qkv("qkv", shape.rows(), 3 * shape.channels()), dout("dout", shape.rows(), shape.channels());
  View2<A> out("out", shape.rows(), shape.channels()), dqkv("dqkv", shape.rows(), 3 * shape.channels());
  test::fill(qkv, 5, -2.0, 2.0);
  test::fill(dout, 6);
  const auto stash = allocate_stash<T, A>(shape);
  const auto work = allocate_work<T, A>(shape);
  const auto probs = [&] {
    if constexpr (std::is_same_v<T, A>) {
      return work.scores;
    } else {
      return work.probs;
    }
  }();
  attention_forward<T, A, P>(space, shape, qkv, stash, work, out);
  const auto forward = test::host_values(probs);
  // Between the passes every work buffer is poisoned: a backward that reused the forward's probabilities
  // instead of recomputing them would end holding NaN.
  poison_work(work);
  attention_backward_input<T, A, P>(space, shape, stash, work, dout, dqkv);
  const auto backward = test::host_values(probs);
  ASSERT_EQ(forward.size(), backward.size());
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < forward.size(); ++i) {
    ASSERT_EQ(forward[i], backward[i]) << "probability " << i;  // float and bf16 values are exact in double
    nonzero += forward[i] != 0;
  }
  EXPECT_EQ(nonzero, std::size_t(shape.heads_in_batch()) * shape.seq * (shape.seq + 1) / 2) << "the causal triangle";
}

TEST(Attention, RecomputedProbabilitiesHaveTheForwardsBits) {
  expect_recomputed_probabilities_have_the_forwards_bits<float, float, KernelPath::device>();
  expect_recomputed_probabilities_have_the_forwards_bits<float, bf16, KernelPath::device>();
  if constexpr (path_available(KernelPath::host)) {
    expect_recomputed_probabilities_have_the_forwards_bits<float, float, KernelPath::host>();
    expect_recomputed_probabilities_have_the_forwards_bits<float, bf16, KernelPath::host>();
  }
}

TEST(Attention, FutureTokensDoNotChangeEarlierOutputs) {
  for (const auto& shape : {tiny, long_seq}) {
    Attention<double> a(shape);
    a.forward();
    auto before = Kokkos::create_mirror(HostSpace(), a.out);
    Kokkos::deep_copy(before, a.out);
    // Change the q, k and v of the last token of sequence 0.
    auto x = Kokkos::create_mirror_view_and_copy(HostSpace(), a.qkv);
    const int last = shape.seq - 1;
    for (std::size_t c = 0; c < x.extent(1); ++c) x(last, c) += 0.5 + 0.1 * double(c);
    Kokkos::deep_copy(a.qkv, x);
    a.forward();
    auto after = Kokkos::create_mirror_view_and_copy(HostSpace(), a.out);
    for (int row = 0; row < int(shape.rows()); ++row)
      for (int c = 0; c < shape.channels(); ++c) {
        if (row == last) continue;
        EXPECT_EQ(after(row, c), before(row, c)) << "row " << row << " column " << c;
      }
    bool last_changed = false;
    for (int c = 0; c < shape.channels(); ++c) last_changed |= after(last, c) != before(last, c);
    EXPECT_TRUE(last_changed) << "the changed token's own output must change";
  }
}

void expect_gradient_matches_finite_differences(const AttentionShape& shape) {
  Attention<double> a(shape, 7);
  View2<double> r("r", shape.rows(), shape.channels()), dqkv("dqkv", shape.rows(), 3 * shape.channels());
  test::fill_uniform(r, 8);
  // L = sum(out * r), so dL/dout = r.
  auto loss = [&] {
    a.forward();
    return test::dot(a.out, r);
  };
  loss();
  a.backward(r, dqkv);
  test::expect_gradient("dqkv", a.qkv, dqkv, loss, 60);
}

TEST(Attention, GradientMatchesFiniteDifferences) { expect_gradient_matches_finite_differences(tiny); }
TEST(Attention, GradientMatchesFiniteDifferencesOverSeveralBlocks) {
  expect_gradient_matches_finite_differences({1, long_seq_rows, 1, 2});
}

// Stash and work are allocated uninitialized and reused: no result may depend on what they held.
TEST(Attention, ResultsDoNotDependOnScratchContents) {
  for (const auto& shape : {tiny, long_seq}) {
    Attention<double> clean(shape, 3), dirty(shape, 3);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    // stash.qkv is written by forward (a copy of qkv); the statistics and every work buffer are scratch.
    Kokkos::deep_copy(clean.stash.qkv, 0.0);
    Kokkos::deep_copy(dirty.stash.qkv, nan);
    for (const auto& [a, fill] : {std::pair{&clean, 0.0}, std::pair{&dirty, nan}}) {
      Kokkos::deep_copy(a->stash.softmax, fill);
      for (const auto& v : {a->work.q, a->work.k, a->work.v, a->work.o, a->work.dq}) Kokkos::deep_copy(v, fill);
      for (const auto& v : {a->work.dk, a->work.dv, a->work.scores, a->work.dprobs}) Kokkos::deep_copy(v, fill);
    }
    // out and dqkv are outputs: every element must be written, whatever they held.
    Kokkos::deep_copy(dirty.out, nan);
    View2<double> dout("dout", shape.rows(), shape.channels());
    View2<double> dqkv_clean("dqkv_clean", shape.rows(), 3 * shape.channels());
    View2<double> dqkv_dirty("dqkv_dirty", shape.rows(), 3 * shape.channels());
    test::fill_uniform(dout, 4);
    Kokkos::deep_copy(dqkv_dirty, nan);
    clean.forward();
    clean.backward(dout, dqkv_clean);
    dirty.forward();
    poison_work(dirty.work);  // and again between the passes: the backward recomputes what it needs
    dirty.backward(dout, dqkv_dirty);
    auto oc = Kokkos::create_mirror_view_and_copy(HostSpace(), clean.out);
    auto od = Kokkos::create_mirror_view_and_copy(HostSpace(), dirty.out);
    auto gc = Kokkos::create_mirror_view_and_copy(HostSpace(), dqkv_clean);
    auto gd = Kokkos::create_mirror_view_and_copy(HostSpace(), dqkv_dirty);
    for (std::size_t i = 0; i < oc.span(); ++i) ASSERT_EQ(oc.data()[i], od.data()[i]) << "out " << i;
    for (std::size_t i = 0; i < gc.span(); ++i) ASSERT_EQ(gc.data()[i], gd.data()[i]) << "dqkv " << i;
  }
}

TEST(Attention, FloatForwardIsCloseToDouble) {
  const AttentionShape shape = long_seq;
  Attention<double> d(shape);
  Attention<float> f(shape);
  auto xd = Kokkos::create_mirror_view_and_copy(HostSpace(), d.qkv);
  auto xf = Kokkos::create_mirror_view(f.qkv);
  for (std::size_t i = 0; i < xd.span(); ++i) xf.data()[i] = float(xd.data()[i]);
  Kokkos::deep_copy(f.qkv, xf);
  d.forward();
  f.forward();
  auto od = Kokkos::create_mirror_view_and_copy(HostSpace(), d.out);
  auto of = Kokkos::create_mirror_view_and_copy(HostSpace(), f.out);
  for (std::size_t i = 0; i < od.span(); ++i) EXPECT_NEAR(of.data()[i], od.data()[i], 1e-5) << i;
}

// Kokkos Kernels names the region of every gemm it runs: "KokkosBlas::gemm[TPL_...]" when the vendor BLAS
// does the work, "KokkosBlas::gemm[ETI]" or "[noETI]" for its own generic kernel, which is ten times
// slower (bench_attention's BM_GemmHeadSubview). A subview of the wrong layout falls back silently.
std::vector<std::string> gemm_regions;
void record_gemm_region(const char* name) {
  const std::string region = name;
  if (region.rfind("KokkosBlas::gemm", 0) == 0) gemm_regions.push_back(region);
}

void run_host_path_products() {
  Attention<float, KernelPath::host> a(long_seq);
  View2<float> dout("dout", long_seq.rows(), long_seq.channels());
  View2<float> dqkv("dqkv", long_seq.rows(), 3 * long_seq.channels());
  gemm_regions.clear();
  Kokkos::Tools::Experimental::set_push_region_callback(record_gemm_region);
  a.forward();
  a.backward(dout, dqkv);
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  // 2 row blocks of T = 131, two products per head forward and five backward (q k^T again).
  EXPECT_EQ(gemm_regions.size(), std::size_t(long_seq.batch * long_seq.heads * 2 * (2 + 5)));
  for (const auto& region : gemm_regions) EXPECT_NE(region.find("TPL"), std::string::npos) << region;
}

// The products on a host build: the vendor BLAS, one head at a time (CUDA builds make each one batched call).
TEST(Attention, ProductsRunOnTheVendorBlas) {
#if !defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  GTEST_SKIP() << "Kokkos Kernels was built without a host vendor BLAS";
#endif
  if constexpr (!path_available(KernelPath::host)) {
    GTEST_SKIP() << "no host path in a build whose tensors live in device memory";
  } else {
    run_host_path_products();
  }
}

TEST(Attention, FlopsCountBothFullProducts) {
  // Two T x T x hd products per head: scores and probs * v.
  EXPECT_DOUBLE_EQ(attention_forward_flops({16, 128, 8, 32}), 2.0 * 2.0 * 16 * 8 * 128 * 128 * 32);
}

TEST(Attention, RejectsMismatchedShapes) {
  Attention<double> a(tiny);
  View2<double> wrong("wrong", tiny.rows(), tiny.channels());  // C columns where 3C are expected
  EXPECT_THROW(attention_forward(ExecSpace(), tiny, wrong, a.stash, a.work, a.out), InputError);
  AttentionShape other = tiny;
  other.seq = 6;
  EXPECT_THROW(attention_forward(ExecSpace(), other, a.qkv, a.stash, a.work, a.out), InputError);
  EXPECT_THROW(allocate_stash<double>({1, 0, 2, 3}), InputError);
  EXPECT_THROW(allocate_work<double>({1, 3, 0, 3}), InputError);
}

}  // namespace
}  // namespace kpipe::nn
