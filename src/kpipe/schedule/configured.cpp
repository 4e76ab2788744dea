#include "kpipe/schedule/configured.hpp"

#include "kpipe/schedule/plan.hpp"

namespace kpipe::schedule {

Replicated configured_schedule(const Config& config) { return plan(config, Delivery::buffered).run; }

Replicated asynchronous_replicas(Updates updates, int stages, int microbatches, const AsyncOptions& options,
                                 int replicas) {
  const Schedule lists = asynchronous(updates, stages, microbatches, options);
  return plan(lists, "generate", Replication{replicas, DpReduction::allreduce, 1}, Delivery::buffered).run;
}

}  // namespace kpipe::schedule
