// The four Linear layers of a block at the bench preset's sizes (d_model 256, MLP 1024), forward,
// backward_input and backward_weight, for a micro-batch of 256 tokens (m = 8) and 2048 tokens (m = 1), as
// GFLOP/s beside the peak that BM_SgemmPeak in kpipe_bench_step measures. These are where a step spends
// most of its time; the gap between the 256- and 2048-row rates is the cost of small micro-batches.
// Each in fp32 (<float>) and in bf16 mixed precision (<bf16>: bf16 operands, fp32 accumulation, and the
// rounding epilogue; on a CPU whose BLAS has no bf16 product the operands are widened to float first).
//   OPENBLAS_NUM_THREADS=1 ./kpipe_bench_linear
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <cstdint>

#include "kpipe/nn/linear.hpp"

// Kernels live in named namespaces: CUDA takes no device lambda in an anonymous one.
namespace kpipe::bench {

// Uniform values in [lo, hi), rounded to A.
template <class A> void fill(const View2<A>& v, std::uint64_t seed, float lo, float hi) {
  View2<float> values(uninitialized("values"), v.extent(0), v.extent(1));
  Kokkos::Random_XorShift64_Pool<ExecSpace> pool(seed);
  Kokkos::fill_random(values, pool, lo, hi);
  Kokkos::parallel_for("kpipe::bench::narrow", range2(ExecSpace(), v.extent(0), v.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) { v(i, j) = narrow<A>(values(i, j)); });
}

}  // namespace kpipe::bench

namespace kpipe::nn {
namespace {

using bench::fill;

constexpr std::int64_t d_model = 256;

template <class A> struct LinearCase {
  Linear<float, A> layer;
  View2<A> x, y, dy, dx;
  LinearCase(std::int64_t rows, std::int64_t in, std::int64_t out)
      : layer{View2<A>("weight", out, in), View1<float>("bias", out), View2<float>("dweight", out, in),
              View1<float>("dbias", out), allocate_products<float>(linear_products_size<float, A>(rows, in, out))},
        x("x", rows, in), y("y", rows, out), dy("dy", rows, out), dx("dx", rows, in) {
    fill(layer.weight, 7, -0.05f, 0.05f);
    fill(x, 8, -1.0f, 1.0f);
    fill(dy, 9, -1.0f, 1.0f);
  }
};

// Arguments: rows, in, out. The product's 2 rows in out FLOPs per call, whichever of the three it is.
template <class A, class Call> void run(benchmark::State& state, const Call& call) {
  const std::int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  LinearCase<A> c(rows, in, out);
  ExecSpace space;
  for (auto _ : state) {
    call(space, c);
    space.fence();
  }
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(2.0 * rows * in * out * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

template <class A> void BM_LinearForward(benchmark::State& state) {
  run<A>(state, [](const ExecSpace& space, const LinearCase<A>& c) { forward(space, c.layer, c.x, c.y); });
}
template <class A> void BM_LinearBackwardInput(benchmark::State& state) {
  run<A>(state, [](const ExecSpace& space, const LinearCase<A>& c) { backward_input(space, c.layer, c.dy, c.dx); });
}
template <class A> void BM_LinearBackwardWeight(benchmark::State& state) {
  run<A>(state, [](const ExecSpace& space, const LinearCase<A>& c) { backward_weight(space, c.layer, c.x, c.dy); });
}

// qkv (256 -> 768), attention projection (256 -> 256), MLP up (256 -> 1024) and down (1024 -> 256).
void shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t rows : {256, 2048})
    for (auto [in, out] : {std::pair{d_model, 3 * d_model}, std::pair{d_model, d_model},
                           std::pair{d_model, 4 * d_model}, std::pair{4 * d_model, d_model}})
      b->Args({rows, in, out});
  b->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_LinearForward, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearForward, bf16)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearBackwardInput, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearBackwardInput, bf16)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearBackwardWeight, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_LinearBackwardWeight, bf16)->Apply(shapes);

}  // namespace
}  // namespace kpipe::nn
