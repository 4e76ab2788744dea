#include "kpipe/partition/configured.hpp"

#include "kpipe/nn/block.hpp"
#include "kpipe/schedule/run_steps.hpp"

namespace kpipe::partition {

InFlight in_flight(const schedule::Replicated& schedule, int sequences, std::int64_t run_steps) {
  return InFlight{schedule::run_stash(schedule, run_steps), sequences};
}

std::vector<LayerRange> configured_partition(const Config& config, const model::ModelDesc& desc,
                                             const schedule::Replicated& schedule) {
  const auto& pc = config.pipeline;
  InFlight held = in_flight(schedule, config.train.batch / config.train.microbatches, config.train.steps);
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
