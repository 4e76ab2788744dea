// Memory-bound layer kernels at the bench preset's sizes (one mini-batch of 16 sequences of 128 tokens,
// d_model 256, MLP 1024, byte vocabulary): bytes each call must move, reported as GB/s. The layers whose
// work is FLOPs have their own programs with GFLOP/s: kpipe_bench_linear, kpipe_bench_attention.
//   OPENBLAS_NUM_THREADS=1 ./kpipe_bench_layers
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <cstdint>

#include "kpipe/core/order_free_hash.hpp"
#include "kpipe/nn/embedding.hpp"
#include "kpipe/nn/gelu.hpp"
#include "kpipe/nn/layernorm.hpp"
#include "kpipe/nn/optimizer.hpp"

namespace kpipe::nn {
namespace {

constexpr std::int64_t rows = 2048;      // tokens per mini-batch (16 sequences of 128; m=1)
constexpr std::int64_t channels = 256;   // d_model
constexpr std::int64_t hidden = 1024;    // MLP width
constexpr int seq = 128;
constexpr std::int64_t vocab = 256;      // bytes
constexpr std::int64_t parameters = 6'500'000;  // about the bench preset's
constexpr double word = sizeof(float);

template <class V> void fill(const V& v, std::uint64_t seed) {
  Kokkos::Random_XorShift64_Pool<ExecSpace> pool(seed);
  Kokkos::fill_random(v, pool, -1.0f, 1.0f);
}

// The bytes one call must move, as a rate over wall time: printed as "bytes=12.3G/s" (decimal G).
void report_bytes(benchmark::State& state, double bytes_per_call) {
  state.counters["bytes"] = benchmark::Counter(bytes_per_call, benchmark::Counter::kIsIterationInvariantRate);
}

struct LayerNormCase {
  LayerNorm<float> ln{View1<float>("gamma", channels), View1<float>("beta", channels),
                      View1<float>("dgamma", channels), View1<float>("dbeta", channels)};
  View2<float> x{"x", rows, channels}, y{"y", rows, channels}, dy{"dy", rows, channels}, dx{"dx", rows, channels};
  View1<float> mean{"mean", rows}, rstd{"rstd", rows};
  LayerNormCase() {
    fill(ln.gamma, 1);
    fill(ln.beta, 2);
    fill(x, 3);
    fill(dy, 4);
    forward(ExecSpace(), ln, x, y, mean, rstd);
  }
};

void BM_LayerNormForward(benchmark::State& state) {
  ExecSpace space;
  LayerNormCase c;
  for (auto _ : state) {
    forward(space, c.ln, c.x, c.y, c.mean, c.rstd);
    space.fence();
  }
  report_bytes(state, word * (2 * rows * channels + 2 * rows + 2 * channels));  // x, y, mean, rstd, gamma, beta
}

void BM_LayerNormBackwardInput(benchmark::State& state) {
  ExecSpace space;
  LayerNormCase c;
  for (auto _ : state) {
    backward_input(space, c.ln, c.x, c.mean, c.rstd, c.dy, c.dx);
    space.fence();
  }
  report_bytes(state, word * (3 * rows * channels + 2 * rows + channels));  // x, dy, dx, mean, rstd, gamma
}

void BM_LayerNormBackwardWeight(benchmark::State& state) {
  ExecSpace space;
  LayerNormCase c;
  for (auto _ : state) {
    backward_weight(space, c.ln, c.x, c.mean, c.rstd, c.dy);
    space.fence();
  }
  report_bytes(state, word * (2 * rows * channels + 2 * rows + 4 * channels));  // x, dy, mean, rstd; dgamma, dbeta rw
}

void BM_GeluForward(benchmark::State& state) {
  ExecSpace space;
  View2<float> x("x", rows, hidden), y("y", rows, hidden);
  fill(x, 5);
  for (auto _ : state) {
    gelu_forward(space, x, y);
    space.fence();
  }
  report_bytes(state, word * 2 * rows * hidden);
}

void BM_GeluBackward(benchmark::State& state) {
  ExecSpace space;
  View2<float> x("x", rows, hidden), dy("dy", rows, hidden), dx("dx", rows, hidden);
  fill(x, 6);
  fill(dy, 7);
  for (auto _ : state) {
    gelu_backward_input(space, x, dy, dx);
    space.fence();
  }
  report_bytes(state, word * 3 * rows * hidden);
}

// What the block runs after the MLP's first product: bias added in place, GeLU written (one pass).
void BM_BiasGeluForward(benchmark::State& state) {
  ExecSpace space;
  View2<float> f("f", rows, hidden), g("g", rows, hidden);
  View1<float> bias("bias", hidden);
  fill(f, 5);
  fill(bias, 14);
  for (auto _ : state) {
    bias_gelu_forward(space, bias, f, g);
    space.fence();
  }
  report_bytes(state, word * (3 * rows * hidden + hidden));  // f read and written, g written, the bias
}

struct EmbeddingCase {
  Embedding<float> emb{View2<float>("token", vocab, channels), View2<float>("position", seq, channels),
                       View2<float>("dtoken", vocab, channels), View2<float>("dposition", seq, channels)};
  View1<Token> tokens{"tokens", rows};
  View2<float> out{"out", rows, channels}, dout{"dout", rows, channels};
  EmbeddingScratch<float> order = allocate_scratch<float>(rows, channels);
  EmbeddingCase() {
    fill(emb.token, 8);
    fill(emb.position, 9);
    fill(dout, 10);
    Kokkos::Random_XorShift64_Pool<ExecSpace> pool(11);
    Kokkos::fill_random(tokens, pool, Token(vocab));
  }
};

void BM_EmbeddingForward(benchmark::State& state) {
  ExecSpace space;
  EmbeddingCase c;
  for (auto _ : state) {
    forward(space, c.emb, c.tokens, seq, c.out);
    space.fence();
  }
  // tokens; one gathered token row and one out row per token; the position table
  report_bytes(state, sizeof(Token) * rows + word * (2 * rows * channels + seq * channels));
}

void BM_EmbeddingBackward(benchmark::State& state) {
  ExecSpace space;
  EmbeddingCase c;
  for (auto _ : state) {
    backward_weight(space, c.emb, c.tokens, seq, c.dout, c.order);
    space.fence();
  }
  // tokens; the sort keys written, sorted and read; dout read by both kernels; one dtoken row read and written per
  // distinct token (at most one per row); dposition read and written
  report_bytes(state, sizeof(Token) * rows + 3 * sizeof(std::int64_t) * rows +
                          word * (2 * rows * channels + 2 * rows * channels + 2 * seq * channels));
}

void BM_AdamW(benchmark::State& state) {
  ExecSpace space;
  OptimizerConfig cfg;
  View1<float> params("params", parameters), grads("grads", parameters), m("m", parameters), v("v", parameters);
  View1<std::uint8_t> mask("mask", parameters);
  Kokkos::deep_copy(mask, 1);
  fill(params, 12);
  fill(grads, 13);
  std::int64_t step = 1;
  for (auto _ : state) {
    adamw_update(space, cfg, 1e-3, step++, 0.5, params, grads, m, v, mask);
    space.fence();
  }
  // params, grads, m, v read; params, m, v written; the mask byte
  report_bytes(state, (7 * word + 1) * parameters);
}

// The replica check's hash of a rank's state (runtime/replica_check.hpp): weights and both moments.
void BM_StateHash(benchmark::State& state) {
  View1<float> params("params", parameters), m("m", parameters), v("v", parameters);
  fill(params, 14);
  fill(m, 15);
  fill(v, 16);
  for (auto _ : state) {
    std::uint64_t hash = 0;
    for (const auto* buffer : {&params, &m, &v}) hash += order_free_hash(ExecSpace(), buffer->data(), parameters, 0, 3);
    benchmark::DoNotOptimize(hash);
  }
  report_bytes(state, 3 * word * parameters);
}

BENCHMARK(BM_LayerNormForward)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_LayerNormBackwardInput)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_LayerNormBackwardWeight)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GeluForward)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_BiasGeluForward)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_EmbeddingForward)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_EmbeddingBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_AdamW)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StateHash)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kpipe::nn
