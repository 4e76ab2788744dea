#include "kpipe/partition/configured.hpp"

#include <algorithm>

#include "kpipe/schedule/validate.hpp"

namespace kpipe::partition {

InFlight in_flight(const schedule::Replicated& schedule, int sequences) {
  InFlight held{{}, sequences};
  for (const auto& replica : schedule.replicas) {
    const auto peak = schedule::peak_stash(replica);
    held.per_rank.resize(std::max(held.per_rank.size(), peak.size()), 0);
    for (std::size_t r = 0; r < peak.size(); ++r) held.per_rank[r] = std::max(held.per_rank[r], peak[r]);
  }
  return held;
}

std::vector<LayerRange> configured_partition(const Config& config, const model::ModelDesc& desc,
                                             const schedule::Replicated& schedule) {
  const auto& pc = config.pipeline;
  const int sequences = config.train.batch / config.train.microbatches;
  return partition_layers(desc, pc.pipeline_size, pc.chunks, pc.partition, in_flight(schedule, sequences));
}

}  // namespace kpipe::partition
