// What weight stashing costs a stage on top of its compute, at the bench preset's sizes (stage 0 of a 2-stage
// pipeline, one micro-batch of 2 sequences as with train.microbatches = 8): a version switch (the chunk's
// parameter buffer made to hold another version: one copy of the stage's parameters), an update (gradient
// norm, AdamW and the copy that keeps the result as the next version), and a micro-batch's forward and
// backward. Under pipedream a stage switches about twice per micro-batch on the first stage (its forward on
// the newest weights, its backward on a stashed one, then the update on the newest again) and updates once;
// BM_MicrobatchWithPipeDreamVersions gives each against the micro-batch's forward and backward (switch_share,
// update_share; a synchronous schedule pays the update once per step, pipedream once per micro-batch).
//   OPENBLAS_NUM_THREADS=1 build/benchmarks/kpipe_bench_weight_versions
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>

#include "kpipe/core/config_io.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/runtime/async_rules.hpp"
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
    versions = std::make_unique<WeightVersions<float>>(space, chunk->params());
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
  void update(std::int64_t u) {
    versions->bind(versions->newest());
    apply_async_update(space, config.optim, rules, /*stage=*/0, u, chunk->params());
    versions->commit(versions->newest() + 1, [&](int v) { return v >= versions->newest() - 1; });
  }
  double parameter_bytes() const { return double(chunk->params().values().extent(0)) * sizeof(float); }
};

void BM_VersionSwitch(benchmark::State& state) {
  Stage stage;
  const int older = stage.versions->newest() - 1;
  for (auto _ : state) {
    stage.versions->bind(stage.versions->bound() == older ? stage.versions->newest() : older);
    stage.space.fence();
  }
  state.counters["bytes"] = benchmark::Counter(stage.parameter_bytes(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_VersionSwitch)->Unit(benchmark::kMillisecond)->UseRealTime();

// One micro-batch's forward and backward, then pipedream's bookkeeping around it timed apart: two switches
// (to a stashed version for a backward, back to the newest for the update) and one update (optimizer and the
// copy kept as the next version).
void BM_MicrobatchWithPipeDreamVersions(benchmark::State& state) {
  Stage stage;
  double compute = 0, switches = 0, updates = 0;
  std::int64_t u = 1;
  const auto timed = [&](double& total, auto&& work) {
    const auto start = std::chrono::steady_clock::now();
    work();
    stage.space.fence();
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (auto _ : state) {
    timed(compute, [&] { stage.microbatch(); });
    timed(switches, [&] {
      stage.versions->bind(stage.versions->newest() - 1);
      stage.versions->bind(stage.versions->newest());
    });
    timed(updates, [&] { stage.update(u++); });
  }
  const double n = double(state.iterations());
  state.counters["compute_ms"] = benchmark::Counter(1e3 * compute / n);
  state.counters["switches_ms"] = benchmark::Counter(1e3 * switches / n);
  state.counters["update_ms"] = benchmark::Counter(1e3 * updates / n);
  state.counters["switch_share"] = benchmark::Counter(switches / compute);
  state.counters["update_share"] = benchmark::Counter(updates / compute);
}
BENCHMARK(BM_MicrobatchWithPipeDreamVersions)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);

}  // namespace
}  // namespace kpipe::runtime
