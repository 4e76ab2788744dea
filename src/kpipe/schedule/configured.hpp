#pragma once
// The runtime's entry points into the pass pipeline until it takes its lists from plan() (plan.hpp), each a
// step of it; new code calls plan().
#include "kpipe/core/config.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/reduction.hpp"

namespace kpipe::schedule {

// plan(config, Delivery::buffered).run: the configuration's lists before any stream-order pass.
Replicated configured_schedule(const Config& config);

// An asynchronous schedule's lists (asynchronous.hpp) for `replicas` replicas, through the pass pipeline with
// buffered delivery: a fresh run's, or a resumed one's (options.resumed).
Replicated asynchronous_replicas(Updates updates, int stages, int microbatches, const AsyncOptions& options,
                                 int replicas);

}  // namespace kpipe::schedule
