// What weight stashing costs a stage on top of its compute, at the bench preset's sizes (stage 0 of a 2-stage
// pipeline, one micro-batch of 2 sequences as with train.microbatches = 8): a version switch (the chunk's
// layers pointed at another version's buffers), an update (the per-layer gradient norms, then one pass of
// AdamW that zeroes the gradients and writes the next version where it will live), and a micro-batch's
// forward and backward. Under pipedream a stage switches about twice per micro-batch on the first stage (its
// forward on the newest weights, its backward on a stashed one) and updates once;
// BM_MicrobatchWithPipeDreamVersions gives each against the micro-batch's forward and backward (switch_share,
// update_share; a synchronous schedule pays the update once per step, pipedream once per micro-batch), and
// BM_UpdatePasses the update's two passes apart, with what they move (GB/s: bytes read and written).
//   OPENBLAS_NUM_THREADS=1 build/benchmarks/kpipe_bench_weight_versions
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "kpipe/core/config_io.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/runtime/async_rules.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/weight_versions.hpp"
#include "kpipe/schedule/plan.hpp"

namespace kpipe::runtime {
namespace {

// Stage 0 of the bench preset on 2 stages under pipedream, its parameters initialized and a first update
// applied, so that two versions (0 and 1) are held.
struct Stage {
  Config config = preset("bench");
  model::ModelDesc desc;
  ExecSpace space;
  std::unique_ptr<model::Chunk<float>> chunk;
  std::unique_ptr<WeightVersions<float>> versions;
  AsyncRules rules;
  int slot = 0;

  Stage() {
    config.pipeline.pipeline_size = 2;
    config.pipeline.schedule = ScheduleKind::pipedream;
    config.train.microbatches = 8;
    desc = model::describe(config.model);
    const auto ranges = partition::configured_partition(config, desc, schedule::plan(config, schedule::Delivery::buffered).run);
    const int sequences = config.train.batch / config.train.microbatches;
    chunk = std::make_unique<model::Chunk<float>>(desc, ranges[0].first, ranges[0].last, sequences);
    chunk->params().initialize(space, config.train.seed);
    versions = std::make_unique<WeightVersions<float>>(space, *chunk);
    rules = AsyncRules::of(config);
    slot = chunk->acquire();
    Kokkos::deep_copy(chunk->tokens(slot), Token(7));
    Kokkos::deep_copy(chunk->output_grad(slot), 1e-3f);
    microbatch();
    update(0);
    space.fence();
  }
  void microbatch() {
    chunk->forward(space, slot);
    chunk->backward_input(space, slot, float(rules.loss_scale()));
    chunk->backward_weight(space, slot);
  }
  // Keeps the version before the newest, as stage 0 of pipedream on 2 stages does: the update is out of place.
  void update(std::int64_t u) {
    const View1<const float> newest = versions->advance(versions->newest() + 1, [&](int v) {
      return v >= versions->newest() - 1;
    });
    apply_async_update(space, config.optim, rules, 0, u, chunk->params(), newest);
  }
};

void BM_VersionSwitch(benchmark::State& state) {
  Stage stage;
  const int older = stage.versions->newest() - 1;
  for (auto _ : state) {
    stage.versions->bind(stage.versions->bound() == older ? stage.versions->newest() : older);
    stage.space.fence();
  }
}
BENCHMARK(BM_VersionSwitch)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Adds to `total` the seconds `work` takes, until the space has finished it.
template <class Work> void add_seconds(const ExecSpace& space, double& total, Work&& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  space.fence();
  total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One micro-batch's forward and backward, then pipedream's bookkeeping around it timed apart: two switches
// (to a stashed version for a backward, back to the newest) and one update (norms and the optimizer's pass,
// writing the next version beside the newest, which stage 0 keeps).
void BM_MicrobatchWithPipeDreamVersions(benchmark::State& state) {
  Stage stage;
  double compute = 0, switches = 0, updates = 0;
  std::int64_t u = 1;
  for (auto _ : state) {
    add_seconds(stage.space, compute, [&] { stage.microbatch(); });
    add_seconds(stage.space, switches, [&] {
      stage.versions->bind(stage.versions->newest() - 1);
      stage.versions->bind(stage.versions->newest());
    });
    add_seconds(stage.space, updates, [&] { stage.update(u++); });
  }
  const double n = double(state.iterations());
  state.counters["compute_ms"] = benchmark::Counter(1e3 * compute / n);
  state.counters["switches_ms"] = benchmark::Counter(1e3 * switches / n);
  state.counters["update_ms"] = benchmark::Counter(1e3 * updates / n);
  state.counters["switch_share"] = benchmark::Counter(switches / compute);
  state.counters["update_share"] = benchmark::Counter(updates / compute);
}
BENCHMARK(BM_MicrobatchWithPipeDreamVersions)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);

// The update's passes over the stage's buffers (n parameters in float): the per-layer squared gradient norms
// (read the gradients: 4n bytes) and AdamW from the newest version into the next one's buffer (read the
// weights, gradients, both moments and the decay mask, write the new weights, both moments and the zeroed
// gradients: 33n bytes), in place (argument 0: the newest is not kept, stage 1's case) or apart (1: stage 0's).
void BM_UpdatePasses(benchmark::State& state) {
  Stage stage;
  auto& p = stage.chunk->params();
  const bool apart = state.range(0) == 1;
  const View1<float> next = apart ? View1<float>(uninitialized("kpipe::benchmarks::next_version"), p.size()) : p.values();
  double norms = 0, optimizer = 0;
  std::int64_t u = 1;
  for (auto _ : state) {
    state.PauseTiming();
    stage.microbatch();  // gradients to update from
    stage.space.fence();
    state.ResumeTiming();
    double squares = 0;
    add_seconds(stage.space, norms, [&] {
      for (double s : p.layer_grad_squares(stage.space)) squares += s;
    });
    add_seconds(stage.space, optimizer, [&] {
      nn::adamw_update_into(stage.space, stage.config.optim, 1e-4, u++, nn::clip_factor(std::sqrt(squares), 1.0),
                            p.values(), next, p.grads(), p.moment1(), p.moment2(), p.decay_mask(), 1.0);
    });
  }
  const double n = double(state.iterations()), bytes = double(p.size());
  state.counters["norms_ms"] = benchmark::Counter(1e3 * norms / n);
  state.counters["optimizer_ms"] = benchmark::Counter(1e3 * optimizer / n);
  state.counters["norms_GBps"] = benchmark::Counter(4 * bytes * n / norms / 1e9);
  state.counters["optimizer_GBps"] = benchmark::Counter(33 * bytes * n / optimizer / 1e9);
}
BENCHMARK(BM_UpdatePasses)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);

}  // namespace
}  // namespace kpipe::runtime
