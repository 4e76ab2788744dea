#pragma once
// The schedule a training configuration runs: generated (pipeline.schedule, .chunks) or read
// (pipeline.schedule_file) for the micro-batches of one replica, lowered, then replicated across
// pipeline.data_parallel replicas by the reduction pass pipeline.dp_reduction asks for (reduction.hpp), and
// validated. Every rank computes the same, so every rank can plan every rank's memory.
#include "kpipe/core/config.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/reduction.hpp"

namespace kpipe::schedule {

Replicated configured_schedule(const Config& config);

// An asynchronous schedule's lists (asynchronous.hpp) for `replicas` replicas, lowered and validated: every
// replica runs the same lists on its own micro-batches, and each update action sums the replicas' gradients
// before it applies them (runtime/gradient_reduction.hpp). A fresh run's, or a resumed one's (options.resumed).
Replicated asynchronous_replicas(Updates updates, int stages, int microbatches, const AsyncOptions& options,
                                 int replicas);

}  // namespace kpipe::schedule
