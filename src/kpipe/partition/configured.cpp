#include "kpipe/partition/configured.hpp"

#include <algorithm>

#include "kpipe/nn/block.hpp"
#include "kpipe/schedule/asynchronous.hpp"
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
  InFlight held = in_flight(schedule, sequences);
  // Asynchronous replicas all run one pipeline's lists; a resumed run's hold fewer near its end than the run did.
  if (const auto& lists = schedule.replicas.front(); lists.asynchronous())
    held.per_rank = schedule::stash_bound(lists.ranks, lists.microbatches, config.train.steps);
  // Under recomputation a block keeps only part of its stash (nn/block.hpp's kept fields).
  const Recompute recompute = config.memory.recompute;
  if (recompute != nn::Recompute::none) {
    const auto& m = config.model;
    const nn::AttentionShape one{1, m.seq_len, m.n_heads, m.d_model / m.n_heads};
    const double block = double(nn::stash_elements(nn::kept_fields(recompute), one, m.mlp_ratio * m.d_model));
    for (const auto& layer : desc.layers)
      held.kept_per_sequence.push_back(layer.kind == model::LayerKind::block ? block : double(layer.stash_elems));
  }
  return partition_layers(desc, pc.pipeline_size, pc.chunks, pc.partition, held);
}

}  // namespace kpipe::partition
