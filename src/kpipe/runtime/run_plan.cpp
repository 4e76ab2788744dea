#include "kpipe/runtime/run_plan.hpp"

#include "kpipe/core/error.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/run_steps.hpp"

namespace kpipe::runtime {

RunPlan plan_run(const Config& config, const model::ModelDesc& desc, const comm::ProcessGrid& grid,
                 comm::TransportKind transport, std::int64_t first_step) {
  const auto& tc = config.train;
  require(tc.microbatches % grid.data_parallel == 0,
          "train.microbatches = {} is not divisible by pipeline.data_parallel = {}", tc.microbatches,
          grid.data_parallel);
  RunPlan p;
  p.transport = transport;
  p.replica = grid.replica;
  p.stage = grid.stage;
  p.local_microbatches = tc.microbatches / grid.data_parallel;
  p.sequences_per_microbatch = tc.batch / tc.microbatches;
  // The one pass through the schedule's pipeline a run makes. A run resumed at or past its last step runs no
  // step: its lists are the fresh run's, which no step reads.
  p.first_step = first_step < config.train.steps ? first_step : 0;
  p.schedule = schedule::plan(config, delivery_of(transport), {p.first_step});
  // The balanced partition weighs each stage's memory with what the schedule keeps in flight there (for
  // asynchronous lists the whole run's bound, whatever step they start at: a resumed run's partition is the
  // uninterrupted run's); the memory plan uses the same partition.
  p.ranges = partition::configured_partition(config, desc, p.schedule.run);
  const auto& lists = p.lists();
  p.actions = lists.actions.at(grid.stage);
  p.steps = schedule::step_ranges(p.actions);
  p.template_step = schedule::template_step(lists);
  return p;
}

}  // namespace kpipe::runtime
