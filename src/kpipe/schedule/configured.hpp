#pragma once
// The schedule a training configuration runs: generated (pipeline.schedule, .chunks) or read
// (pipeline.schedule_file) for the micro-batches of one replica, lowered, then replicated across
// pipeline.data_parallel replicas by the reduction pass pipeline.dp_reduction asks for (reduction.hpp), and
// validated. Every rank computes the same, so every rank can plan every rank's memory.
#include "kpipe/core/config.hpp"
#include "kpipe/schedule/reduction.hpp"

namespace kpipe::schedule {

Replicated configured_schedule(const Config& config);

}  // namespace kpipe::schedule
