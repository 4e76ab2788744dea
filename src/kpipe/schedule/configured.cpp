#include "kpipe/schedule/configured.hpp"

#include <algorithm>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {

Replicated configured_schedule(const Config& c) {
  const auto& p = c.pipeline;
  require(c.train.microbatches % p.data_parallel == 0,
          "train.microbatches = {} is not divisible by pipeline.data_parallel = {}", c.train.microbatches,
          p.data_parallel);
  const int local = c.train.microbatches / p.data_parallel;
  if (is_asynchronous(p.schedule) && p.schedule_file.empty()) {
    // No flush: the lists of a whole run of Horizon::steps() steps (asynchronous.hpp), whose middle step
    // repeats in a longer run; a run executes them step by step.
    require(p.chunks == 1, "pipeline.chunks = {} with pipeline.schedule = \"{}\": asynchronous schedules run one chunk per "
            "rank (the version rule is per stage)", p.chunks, p.schedule);
    require(p.data_parallel == 1 || p.dp_reduction_group == 1,
            "pipeline.dp_reduction_group = {} with pipeline.schedule = \"{}\": asynchronous schedules sum the replicas' "
            "gradients at every update, not in groups of micro-batches", p.dp_reduction_group, p.schedule);
    // A run shorter than the horizon runs lists of its own length (its last step drains the pipeline).
    const int steps = std::min(Horizon{p.pipeline_size, local}.steps(), c.train.steps);
    return asynchronous_replicas(updates_of(p.schedule, p.vertical_sync == 1), p.pipeline_size, local, {steps, false},
                                 p.data_parallel);
  }
  Schedule s = p.schedule_file.empty() ? generate(p.schedule, p.pipeline_size, local, p.chunks)
                                       : read_schedule_file(p.schedule_file, local, p.chunks);
  require(s.ranks == p.pipeline_size && s.microbatches == local && s.chunks == p.chunks,
          "pipeline.schedule_file = '{}': written for {} ranks, {} micro-batches, {} chunks; the run has {}, {}, {}",
          p.schedule_file, s.ranks, s.microbatches, s.chunks, p.pipeline_size, local, p.chunks);
  require(!s.asynchronous(), "pipeline.schedule_file = '{}': an asynchronous schedule ('updates ...'); use "
          "pipeline.schedule = \"pipedream\" or \"2bw\", whose lists the run generates", p.schedule_file);
  s = lower(s);
  validate(s);
  Replicated r = p.dp_reduction == DpReduction::ordered ? order_reduction(s, p.data_parallel, p.dp_reduction_group)
                                             : allreduce_replicas(s, p.data_parallel);
  try {
    validate(r);
  } catch (const InputError& e) {
    // With several chunks per rank, groups longer than one micro-batch can make the chunks' sums wait on
    // each other; say which key to change.
    if (r.ordered && r.group > 1)
      throw InputError(fmt::format("pipeline.dp_reduction_group = {} with {} chunks per rank: {} (groups of 1 never "
                                   "wait on each other)",
                                   r.group, p.chunks, e.what()));
    throw;
  }
  return r;
}

Replicated asynchronous_replicas(Updates updates, int stages, int microbatches, const AsyncOptions& options,
                                 int replicas) {
  Schedule s = lower(asynchronous(updates, stages, microbatches, options));
  validate(s);
  Replicated r = allreduce_replicas(s, replicas);
  validate(r);
  return r;
}

}  // namespace kpipe::schedule
