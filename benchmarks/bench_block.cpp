// One GPT block, forward, backward_input and backward_weight, at the bench preset's sizes (a micro-batch of
// 16 sequences of 128 tokens, d_model 256, 8 heads, MLP 1024), in fp32 (<float>) and in bf16 mixed
// precision (<bf16>), as tokens per second. The block is everything between two stages' messages, so the
// ratio of the two is what mixed precision does to a step's compute on this machine.
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./kpipe_bench_block
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <cstdint>

#include "kpipe/nn/block.hpp"

// Kernels live in named namespaces: CUDA takes no device lambda in an anonymous one.
namespace kpipe::bench {

template <class V> void fill(const V& v, std::uint64_t seed, float amplitude) {
  using A = typename V::non_const_value_type;
  const View1<float> values(uninitialized("values"), v.span());
  Kokkos::Random_XorShift64_Pool<ExecSpace> pool(seed);
  Kokkos::fill_random(values, pool, -amplitude, amplitude);
  A* const out = v.data();
  Kokkos::parallel_for("kpipe::bench::narrow", range(ExecSpace(), values.extent(0)),
                       KOKKOS_LAMBDA(std::int64_t i) { out[i] = narrow<A>(values(i)); });
}

}  // namespace kpipe::bench

namespace kpipe::nn {
namespace {

using bench::fill;

constexpr int sequences = 16, seq = 128, channels = 256, heads = 8, hidden = 4 * channels;


template <class A> LayerNorm<float, A> layer_norm() {
  LayerNorm<float, A> ln{View1<float>("gamma", channels), View1<float>("beta", channels),
                         View1<float>("dgamma", channels), View1<float>("dbeta", channels)};
  Kokkos::deep_copy(ln.gamma, 1.0f);
  return ln;
}

template <class A> Linear<float, A> linear(std::int64_t in, std::int64_t out, const Products<float>& products) {
  Linear<float, A> l{View2<A>("weight", out, in), View1<float>("bias", out), View2<float>("dweight", out, in),
                     View1<float>("dbias", out), products};
  fill(l.weight, std::uint64_t(in * 7 + out), 0.05f);
  return l;
}

template <class A> struct BlockCase {
  AttentionShape shape{sequences, seq, heads, channels / heads};
  Products<float> products = allocate_products<float>(block_products_size<float, A>(shape, hidden));
  Block<float, A> block{layer_norm<A>(),
                        layer_norm<A>(),
                        linear<A>(channels, 3 * channels, products),
                        linear<A>(channels, channels, products),
                        linear<A>(channels, hidden, products),
                        linear<A>(hidden, channels, products),
                        shape,
                        hidden};
  BlockStash<float, A> stash = allocate_stash(block);
  BlockGrads<float, A> grads = allocate_grads(block);
  BlockWork<float, A> work = allocate_work(block);
  View2<A> x = View2<A>("x", shape.rows(), channels), dout = View2<A>("dout", shape.rows(), channels),
           dx = View2<A>("dx", shape.rows(), channels);
  BlockCase() {
    fill(x, 1, 1.0f);
    fill(dout, 2, 1.0f);
  }
};

template <class A, class Call> void run(benchmark::State& state, const Call& call) {
  BlockCase<A> c;
  ExecSpace space;
  forward(space, c.block, c.x, c.stash, c.work);
  backward_input(space, c.block, c.x, c.stash, c.grads, c.work, c.dout, c.dx);
  for (auto _ : state) {
    call(space, c);
    space.fence();
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(double(c.shape.rows()), benchmark::Counter::kIsIterationInvariantRate);
}

template <class A> void BM_BlockForward(benchmark::State& state) {
  run<A>(state, [](const ExecSpace& space, BlockCase<A>& c) { forward(space, c.block, c.x, c.stash, c.work); });
}
template <class A> void BM_BlockBackwardInput(benchmark::State& state) {
  run<A>(state, [](const ExecSpace& space, BlockCase<A>& c) {
    backward_input(space, c.block, c.x, c.stash, c.grads, c.work, c.dout, c.dx);
  });
}
template <class A> void BM_BlockBackwardWeight(benchmark::State& state) {
  run<A>(state, [](const ExecSpace& space, BlockCase<A>& c) {
    backward_weight(space, c.block, c.x, c.stash, c.grads, c.dout);
  });
}

BENCHMARK_TEMPLATE(BM_BlockForward, float)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_BlockForward, bf16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_BlockBackwardInput, float)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_BlockBackwardInput, bf16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_BlockBackwardWeight, float)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_BlockBackwardWeight, bf16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kpipe::nn
