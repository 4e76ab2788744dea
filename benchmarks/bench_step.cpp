// One training step of a preset on one rank, one thread: tokens/s, GFLOP/s (model FLOPs from the model
// description, attention counted as the full T x T products kpipe computes), and the share of the step
// spent inside KokkosBlas::gemm (timed through Kokkos' profiling regions, which Kokkos Kernels opens
// around every gemm). BM_SgemmPeak measures what one core's sgemm can do, for the ratio.
//   OPENBLAS_NUM_THREADS=1 build/benchmarks/kpipe_bench_step
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include <cstring>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/blas.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace {

// Time spent in regions whose name starts with "KokkosBlas::gemm". Kokkos Tools callbacks are plain
// function pointers, hence this file-local state (benchmark only).
struct GemmClock {
  int depth = 0;       // region nesting depth
  int gemm_depth = -1; // depth of the open gemm region, -1 when none
  std::chrono::steady_clock::time_point start;
  double seconds = 0;
};
GemmClock gemm_clock;

void push_region(const char* name) {
  if (gemm_clock.gemm_depth < 0 && std::strncmp(name, "KokkosBlas::gemm", 16) == 0) {
    gemm_clock.gemm_depth = gemm_clock.depth;
    gemm_clock.start = std::chrono::steady_clock::now();
  }
  ++gemm_clock.depth;
}

void pop_region() {
  --gemm_clock.depth;
  if (gemm_clock.depth == gemm_clock.gemm_depth) {
    gemm_clock.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - gemm_clock.start).count();
    gemm_clock.gemm_depth = -1;
  }
}

void BM_TrainingStep(benchmark::State& state) {
  kpipe::Config config = kpipe::preset("bench");
  config.train.microbatches = int(state.range(0));
  config.data.synthetic_tokens = 1 << 18;
  const auto corpus = kpipe::data::synthetic_corpus(config.train.seed, config.data.synthetic_tokens, 0.1);
  auto grid = kpipe::comm::make_grid(MPI_COMM_SELF, 1, 1);
  {
    kpipe::runtime::Trainer<float> trainer(config, corpus, grid);
    trainer.step();  // first step allocates the stash slots
    Kokkos::Tools::Experimental::set_push_region_callback(push_region);
    Kokkos::Tools::Experimental::set_pop_region_callback(pop_region);
    gemm_clock.seconds = 0;
    double step_seconds = 0;
    for (auto _ : state) step_seconds += trainer.step().seconds;
    Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
    Kokkos::Tools::Experimental::set_pop_region_callback(nullptr);
    const auto& desc = trainer.desc();
    const double flops = (desc.forward_flops_per_sequence() + desc.backward_flops_per_sequence()) * config.train.batch;
    const double tokens = double(config.train.batch) * config.model.seq_len;
    state.counters["tokens_per_s"] = benchmark::Counter(tokens * state.iterations() / step_seconds);
    state.counters["GFLOP_per_s"] = benchmark::Counter(flops * state.iterations() / step_seconds / 1e9);
    state.counters["gemm_share"] = benchmark::Counter(gemm_clock.seconds / step_seconds);
  }
  kpipe::comm::free_grid(grid);
}
BENCHMARK(BM_TrainingStep)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

void BM_SgemmPeak(benchmark::State& state) {
  const int n = int(state.range(0));
  kpipe::View2<float> a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 1.0f);
  Kokkos::deep_copy(b, 0.5f);
  kpipe::ExecSpace space;
  for (auto _ : state) {
    kpipe::blas::gemm(space, "N", "N", 1.0f, a, b, 0.0f, c);
    space.fence();
  }
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(kpipe::blas::gemm_flops(n, n, n) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SgemmPeak)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
