#pragma once
// The partition a training configuration runs: pipeline.partition over pipeline_size x chunks virtual
// stages, the balanced method weighing each stage's memory with what the configured schedule keeps in
// flight there. kpipe-train builds its chunks from it, the memory plan predicts their bytes from it and the
// planner prices its stages with it: one partition, computed the same way on every rank and in every tool.
#include <cstdint>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/partition/partition.hpp"
#include "kpipe/schedule/reduction.hpp"

namespace kpipe::partition {

// Per rank, the most micro-batches a run of `run_steps` steps of `schedule` holds there at once
// (schedule::run_stash: any replica's lists' peak, or an asynchronous run's bound), with `sequences` each.
InFlight in_flight(const schedule::Replicated& schedule, int sequences, std::int64_t run_steps);

// Layer ranges of every virtual stage (k = c * pipeline_size + r) of `config` running `schedule`
// (schedule/plan.hpp: a plan's run); under memory.recompute a block's activations in flight are what it keeps.
// What a run of train.steps holds in flight is weighed (in_flight): asynchronous lists weigh the whole run's
// bound, not what the lists hold, so a run resumed at any step gets the uninterrupted run's partition without
// planning that run.
std::vector<LayerRange> configured_partition(const Config& config, const model::ModelDesc& desc,
                                             const schedule::Replicated& schedule);

}  // namespace kpipe::partition
