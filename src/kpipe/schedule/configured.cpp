#include "kpipe/schedule/configured.hpp"

#include "kpipe/core/error.hpp"
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
  Schedule s = p.schedule_file.empty() ? generate(p.schedule, p.pipeline_size, local, p.chunks)
                                       : read_schedule_file(p.schedule_file, local, p.chunks);
  require(s.ranks == p.pipeline_size && s.microbatches == local && s.chunks == p.chunks,
          "pipeline.schedule_file = '{}': written for {} ranks, {} micro-batches, {} chunks; the run has {}, {}, {}",
          p.schedule_file, s.ranks, s.microbatches, s.chunks, p.pipeline_size, local, p.chunks);
  s = lower(s);
  validate(s);
  Replicated r = p.dp_reduction == "ordered" ? order_reduction(s, p.data_parallel, p.dp_reduction_group)
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

}  // namespace kpipe::schedule
