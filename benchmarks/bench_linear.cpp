// The four Linear layers of a block at the bench preset's sizes (d_model 256, MLP 1024), forward,
// backward_input and backward_weight, for a micro-batch of 256 tokens (m = 8) and 2048 tokens (m = 1), as
// GFLOP/s beside the peak that BM_SgemmPeak in kpipe_bench_step measures. These are where a step spends
// most of its time; the gap between the 256- and 2048-row rates is the cost of small micro-batches.
//   OPENBLAS_NUM_THREADS=1 ./kpipe_bench_linear
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <cstdint>

#include "kpipe/nn/linear.hpp"

namespace kpipe::nn {
namespace {

constexpr std::int64_t d_model = 256;

struct LinearCase {
  Linear<float> layer;
  View2<float> x, y, dy, dx;
  LinearCase(std::int64_t rows, std::int64_t in, std::int64_t out)
      : layer{View2<float>("weight", out, in), View1<float>("bias", out), View2<float>("dweight", out, in),
              View1<float>("dbias", out)},
        x("x", rows, in), y("y", rows, out), dy("dy", rows, out), dx("dx", rows, in) {
    Kokkos::Random_XorShift64_Pool<ExecSpace> pool(7);
    Kokkos::fill_random(layer.weight, pool, -0.05f, 0.05f);
    Kokkos::fill_random(x, pool, -1.0f, 1.0f);
    Kokkos::fill_random(dy, pool, -1.0f, 1.0f);
  }
};

// Arguments: rows, in, out. The product's 2 rows in out FLOPs per call, whichever of the three it is.
template <class Call> void run(benchmark::State& state, const Call& call) {
  const std::int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  LinearCase c(rows, in, out);
  ExecSpace space;
  for (auto _ : state) {
    call(space, c);
    space.fence();
  }
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(2.0 * rows * in * out * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LinearForward(benchmark::State& state) {
  run(state, [](const ExecSpace& space, const LinearCase& c) { forward(space, c.layer, c.x, c.y); });
}
void BM_LinearBackwardInput(benchmark::State& state) {
  run(state, [](const ExecSpace& space, const LinearCase& c) { backward_input(space, c.layer, c.dy, c.dx); });
}
void BM_LinearBackwardWeight(benchmark::State& state) {
  run(state, [](const ExecSpace& space, const LinearCase& c) { backward_weight(space, c.layer, c.x, c.dy); });
}

// qkv (256 -> 768), attention projection (256 -> 256), MLP up (256 -> 1024) and down (1024 -> 256).
void shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t rows : {256, 2048})
    for (auto [in, out] : {std::pair{d_model, 3 * d_model}, std::pair{d_model, d_model},
                           std::pair{d_model, 4 * d_model}, std::pair{4 * d_model, d_model}})
      b->Args({rows, in, out});
  b->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_LinearForward)->Apply(shapes);
BENCHMARK(BM_LinearBackwardInput)->Apply(shapes);
BENCHMARK(BM_LinearBackwardWeight)->Apply(shapes);

}  // namespace
}  // namespace kpipe::nn
