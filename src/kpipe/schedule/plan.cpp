#include "kpipe/schedule/plan.hpp"

#include <algorithm>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/configured.hpp"
#include "kpipe/schedule/stream_order.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {

Plan plan(const Config& config, Delivery delivery, const PlanOptions& options) {
  const auto& pc = config.pipeline;
  Plan p;
  p.delivery = delivery;
  if (options.first_step > 0 && is_asynchronous(pc.schedule)) {
    const int local = config.train.microbatches / pc.data_parallel;
    const int steps = int(std::min<std::int64_t>(Horizon{pc.pipeline_size, local}.steps(),
                                                 config.train.steps - options.first_step));
    p.run = asynchronous_replicas(updates_of(pc.schedule, pc.vertical_sync == 1), pc.pipeline_size, local,
                                  {steps, true}, pc.data_parallel);
  } else {
    p.run = configured_schedule(config);
  }
  const bool replicated = p.run.replica_count() > 1;
  p.sums = !replicated ? SumRoute::none : p.run.ordered ? SumRoute::ordered_on_transport : SumRoute::allreduce;
  if (delivery == Delivery::stream_ordered) {
    require(!p.run.replicas.front().asynchronous(),
            "pipeline.transport = \"nccl\" with pipeline.schedule = \"{}\": asynchronous schedules run over MPI only "
            "in this version (\"auto\" picks MPI for them)", pc.schedule);
    p.run = order_for_streams(p.run);
    validate(p.run);
    p.passes.push_back("order_for_streams");
    if (p.run.ordered) {
      try {
        validate_stream_order(p.run, SumTransport::stream);
      } catch (const InputError&) {
        validate_stream_order(p.run, SumTransport::mpi);
        p.sums = SumRoute::ordered_by_mpi;
      }
    } else {
      validate_stream_order(p.run);
    }
  }
  return p;
}

}  // namespace kpipe::schedule
