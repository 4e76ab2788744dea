// Cost of one generated token (kpipe-generate's full-window recompute, runtime/generator.hpp) on one rank,
// one thread: the small preset (4 blocks, d_model 128, seq_len 128) with a byte vocabulary and with a BPE
// vocabulary of 8192, random weights (the cost does not depend on them). Counters: ms per token, tokens/s,
// the FLOPs of the window's forward, and the FLOPs a KV-cached step would need for the same token at a full
// window (one row through every matrix product, attention against seq_len cached keys), for the ratio.
//   OPENBLAS_NUM_THREADS=1 build/benchmarks/kpipe_bench_generate
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/runtime/generator.hpp"

namespace {

// FLOPs of one token's forward with a KV cache holding `context` earlier tokens: every matrix product for one
// row, the attention scores and weighted sum against context + 1 keys, the head for one row.
double cached_token_flops(const kpipe::ModelConfig& c, int context) {
  const double C = c.d_model, F = double(c.mlp_ratio) * c.d_model, V = c.vocab;
  const double block = 2.0 * (3 * C * C + C * C + 2 * C * F) + 2.0 * 2.0 * (context + 1) * C;
  return c.n_layers * block + 2.0 * C * V;
}

void BM_GenerateToken(benchmark::State& state) {
  kpipe::Config config = kpipe::preset("small");
  config.model.vocab = int(state.range(0));
  config.train.batch = config.train.microbatches = 1;
  auto grid = kpipe::comm::make_grid(MPI_COMM_SELF, 1, 1);
  {
    const kpipe::data::Tokenizer bytes;  // which ids may come out does not change the cost
    const auto desc = kpipe::model::describe(config.model);
    const auto plan = kpipe::runtime::plan_run(config, desc, grid, kpipe::comm::TransportKind::mpi);
    kpipe::runtime::StageModel<float> stage(config, desc, grid, plan);
    kpipe::runtime::Generator<float> generator(stage, plan, bytes);
    kpipe::runtime::SamplingOptions options;
    // A full window: every token sees seq_len - 1 before it, the steady state of a long generation.
    std::vector<kpipe::Token> context(std::size_t(config.model.seq_len), 'a');
    std::int64_t position = 0;
    generator.next(context, options, position++);  // first call allocates
    double seconds = 0;
    for (auto _ : state) {
      const auto start = std::chrono::steady_clock::now();
      context.push_back(generator.next(context, options, position++));
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const double window_flops = desc.forward_flops_per_sequence();
    const double cached_flops = cached_token_flops(config.model, config.model.seq_len - 1);
    state.counters["ms_per_token"] = benchmark::Counter(1e3 * seconds / double(state.iterations()));
    state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations()) / seconds);
    state.counters["window_GFLOP"] = benchmark::Counter(window_flops / 1e9);
    state.counters["kv_cache_GFLOP"] = benchmark::Counter(cached_flops / 1e9);
    state.counters["GFLOP_per_s"] = benchmark::Counter(window_flops * double(state.iterations()) / seconds / 1e9);
  }
  kpipe::comm::free_grid(grid);
}
BENCHMARK(BM_GenerateToken)->ArgName("vocab")->Arg(256)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
