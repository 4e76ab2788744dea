// Attention core and cross-entropy kernels at the "bench" shape, plus the cost of a single head-sized
// gemm against a projection-sized one (the per-call overhead that attention's per-head loops pay).
// Run with OPENBLAS_NUM_THREADS=1 for per-core figures.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "kpipe/core/blas.hpp"
#include "kpipe/nn/attention.hpp"
#include "kpipe/nn/cross_entropy.hpp"

namespace kpipe::bench {

// Deterministic values in [-amplitude, amplitude) from an integer hash of the element's offset: no host
// RNG, any memory space.
template <class V> void fill_hashed(const V& v, double amplitude, std::uint64_t seed) {
  using T = typename V::non_const_value_type;
  const Kokkos::View<T*, typename V::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> flat(v.data(), v.span());
  Kokkos::parallel_for("kpipe::bench::fill_hashed", range(ExecSpace(), flat.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
    const std::uint64_t h = (std::uint64_t(i) + seed) * 0x9E3779B97F4A7C15ull;
    flat(i) = T(amplitude * (double((h >> 40) & 0xFFFFFF) / double(1 << 23) - 1.0));
  });
  ExecSpace().fence();
}

void fill_targets(const View1<Token>& targets, Token vocab) {
  Kokkos::parallel_for("kpipe::bench::fill_targets", range(ExecSpace(), targets.extent(0)),
                       KOKKOS_LAMBDA(std::int64_t i) { targets(i) = Token((i * 7919) % vocab); });
  ExecSpace().fence();
}

}  // namespace kpipe::bench

namespace {

using namespace kpipe;
using namespace kpipe::nn;

const AttentionShape bench_shape{16, 128, 8, 32};  // B, T, H, hd: C = 256, 2048 tokens
const AttentionShape long_shape{2, 1024, 8, 32};    // the same 2048 tokens in long sequences

// Argument 0: the "bench" shape, 1: long sequences.
const AttentionShape& shape_arg(const benchmark::State& state) {
  return state.range(0) == 0 ? bench_shape : long_shape;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void label_shape(benchmark::State& state, const AttentionShape& s) {
  state.SetLabel("B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seq) + " H=" + std::to_string(s.heads) +
                 " hd=" + std::to_string(s.head_dim));
}

void BM_AttentionForward(benchmark::State& state) {
  const auto& s = shape_arg(state);
  ExecSpace space;
  View2<float> out("out", s.rows(), s.channels());
  const auto stash = allocate_stash<float>(s);
  const auto work = allocate_work<float>(s);
  bench::fill_hashed(stash.qkv, 2.0, 1);  // where the block's projection writes q | k | v: no copy
  for (auto _ : state) {
    attention_forward(space, s, stash.qkv, stash, work, out);
    space.fence();
  }
  set_flops(state, attention_forward_flops(s));
  label_shape(state, s);
}
BENCHMARK(BM_AttentionForward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_AttentionBackward(benchmark::State& state) {
  const auto& s = shape_arg(state);
  ExecSpace space;
  View2<float> qkv("qkv", s.rows(), 3 * s.channels()), out("out", s.rows(), s.channels());
  View2<float> dout("dout", s.rows(), s.channels()), dqkv("dqkv", s.rows(), 3 * s.channels());
  const auto stash = allocate_stash<float>(s);
  const auto work = allocate_work<float>(s);
  bench::fill_hashed(qkv, 2.0, 1);
  bench::fill_hashed(dout, 1.0, 2);
  attention_forward(space, s, qkv, stash, work, out);
  for (auto _ : state) {
    attention_backward_input(space, s, stash, work, dout, dqkv);
    space.fence();
  }
  set_flops(state, 2 * attention_forward_flops(s));
  label_shape(state, s);
}
BENCHMARK(BM_AttentionBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

constexpr int ce_rows = 2048, ce_vocab = 256;

void BM_CrossEntropyForward(benchmark::State& state) {
  ExecSpace space;
  View2<float> logits("logits", ce_rows, ce_vocab);
  View1<float> losses("losses", ce_rows);
  View1<Token> targets("targets", ce_rows);
  bench::fill_hashed(logits, 4.0, 3);
  bench::fill_targets(targets, ce_vocab);
  for (auto _ : state) {
    cross_entropy_forward(space, logits, targets, losses);
    space.fence();
  }
  state.SetBytesProcessed(state.iterations() * std::int64_t(sizeof(float)) * ce_rows * ce_vocab);
}
BENCHMARK(BM_CrossEntropyForward)->Unit(benchmark::kMicrosecond);

void BM_CrossEntropyBackward(benchmark::State& state) {
  ExecSpace space;
  View2<float> logits("logits", ce_rows, ce_vocab), dlogits("dlogits", ce_rows, ce_vocab);
  View1<Token> targets("targets", ce_rows);
  bench::fill_hashed(logits, 4.0, 3);
  bench::fill_targets(targets, ce_vocab);
  for (auto _ : state) {
    cross_entropy_backward_input(space, logits, targets, 1.0f / ce_rows, dlogits);
    space.fence();
  }
  state.SetBytesProcessed(state.iterations() * std::int64_t(2 * sizeof(float)) * ce_rows * ce_vocab);
}
BENCHMARK(BM_CrossEntropyBackward)->Unit(benchmark::kMicrosecond);

// C[m, n] = A[m, k] B[n, k]^T, the shape of both q k^T (one head) and x W^T (a projection).
void BM_Gemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  ExecSpace space;
  View2<float> a("a", m, k), b("b", n, k), c("c", m, n);
  bench::fill_hashed(a, 1.0, 4);
  bench::fill_hashed(b, 1.0, 5);
  for (auto _ : state) {
    blas::gemm(space, "N", "T", 1.0f, a, b, 0.0f, c);
    space.fence();
  }
  set_flops(state, blas::gemm_flops(m, n, k));
}
// 4 x 4 x 4 is all fixed cost: the per-call overhead of KokkosBlas::gemm plus the BLAS call.
BENCHMARK(BM_Gemm)
    ->Args({4, 4, 4})
    ->Args({64, 64, 32})
    ->Args({128, 128, 32})
    ->Args({2048, 768, 256})
    ->Unit(benchmark::kMicrosecond);

// The same head product on subviews of [B, H, T, hd] tensors, as attention calls it: LayoutRight
// subviews (vendor BLAS), and the same data through LayoutStride subviews (Kokkos Kernels' own kernel),
// to show what missing the BLAS path would cost.
void BM_GemmHeadSubview(benchmark::State& state) {
  const auto& s = bench_shape;
  ExecSpace space;
  View4<float> q("q", s.batch, s.heads, s.seq, s.head_dim), k("k", s.batch, s.heads, s.seq, s.head_dim);
  View4<float> scores("scores", s.batch, s.heads, s.seq, s.seq);
  bench::fill_hashed(q, 1.0, 6);
  bench::fill_hashed(k, 1.0, 7);
  const bool strided = state.range(0) != 0;
  for (auto _ : state) {
    const auto qh = Kokkos::subview(q, 3, 5, Kokkos::ALL, Kokkos::ALL);
    const auto kh = Kokkos::subview(k, 3, 5, Kokkos::ALL, Kokkos::ALL);
    const auto sh = Kokkos::subview(scores, 3, 5, Kokkos::ALL, Kokkos::ALL);
    if (strided) {
      using Strided = Kokkos::View<float**, Kokkos::LayoutStride, MemSpace>;
      blas::gemm(space, "N", "T", 1.0f, Strided(qh), Strided(kh), 0.0f, Strided(sh));
    } else {
      blas::gemm(space, "N", "T", 1.0f, qh, kh, 0.0f, sh);
    }
    space.fence();
  }
  set_flops(state, blas::gemm_flops(s.seq, s.seq, s.head_dim));
  state.SetLabel(strided ? "LayoutStride" : "LayoutRight");
}
BENCHMARK(BM_GemmHeadSubview)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
