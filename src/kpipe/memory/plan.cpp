#include "kpipe/memory/plan.hpp"

#include <fmt/format.h>

#include "kpipe/core/bytes.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/nn/block.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/run_steps.hpp"
#include "kpipe/schedule/versions.hpp"

namespace kpipe::memory {

template <class T, class A>
RankMemory plan_rank_for(const Config& config, const model::ModelDesc& desc, const schedule::Plan& plan,
                         int replica, int stage) {
  const schedule::Replicated& replicated = plan.run;
  constexpr std::int64_t e = sizeof(T);
  const auto& pc = config.pipeline;
  const schedule::Schedule& s = replicated.replicas.at(replica);
  const int sequences = config.train.batch / config.train.microbatches;
  const std::int64_t rows = std::int64_t(sequences) * config.model.seq_len;
  std::int64_t message_bytes = 0;  // one [N, C] buffer in A
  const nn::Recompute recompute = config.memory.recompute;
  const auto ranges = partition::configured_partition(config, desc, replicated);
  const schedule::BufferPlan& buffers = plan.buffers.at(replica).at(stage);  // what the runtime follows
  // The weight versions the lists hold at once (schedule/versions.hpp; runtime/weight_versions.hpp keeps them):
  // one in the chunk's own parameter buffers, the others in buffers of the same layout (synchronous lists hold
  // one).
  const auto versions = schedule::plan_versions(s, stage, s.actions.at(stage));
  const bool snapshots = !config.checkpoint.dir.empty() && config.checkpoint.async != CheckpointAsync::off;

  RankMemory r;
  r.replica = replica;
  r.stage = stage;
  r.world_rank = replica * pc.pipeline_size + stage;
  auto add = [&](Category category, std::int64_t bytes) { r.bytes[int(category)] += bytes; };
  for (int c = 0; c < s.chunks; ++c) {
    const auto& range = ranges.at(s.virtual_stage(stage, c));
    // What model::Chunk<T, A> allocates (its chunk_bytes), the pools' sizes from the schedule.
    const model::ChunkBytes bytes = model::chunk_bytes<T, A>(desc, range.first, range.last, sequences, recompute);
    ChunkMemory m;
    m.first_layer = range.first;
    m.last_layer = range.last;
    m.parameters = bytes.parameters / e;
    m.compute_copy_bytes = bytes.compute_copy;
    m.slot_bytes = bytes.slot;
    m.backward_bytes = bytes.backward_set;
    m.workspace_bytes = bytes.workspace;
    m.slots = buffers.slots.at(c);
    m.backward_sets = buffers.backward_sets.at(c);
    message_bytes = bytes.message;
    add(Category::parameters, bytes.parameters + bytes.compute_copy);  // masters, and the products' copy in A
    add(Category::gradients, m.parameters * e);
    // Where each update's running sum of the replicas before this one arrives (asynchronous, in order).
    if (schedule::holds_update_sum(plan, replica)) add(Category::gradients, m.parameters * e);
    add(Category::optimizer, m.parameters * (2 * e + 1));
    // Each version beyond the chunk's own with its masters and, under mixed precision, their compute copy.
    add(Category::weight_versions, (versions.peak.at(c) - 1) * (bytes.parameters + bytes.compute_copy));
    add(Category::activations, m.slots * m.slot_bytes);
    add(Category::backward, m.backward_sets * m.backward_bytes);
    add(Category::workspaces, m.workspace_bytes);
    // Checkpoints written beside the training: replica 0's snapshot of each chunk's masters, both moments and
    // the most older versions a checkpoint holds (io/checkpoint_snapshot.hpp); the other replicas write nothing.
    if (snapshots && replica == 0) {
      const int older = schedule::versions_bound(s.updates, s.ranks, s.virtual_stage(stage, c)) - 1;  // flush: 0
      add(Category::snapshot, (3 + older) * m.parameters * e);
    }
    r.chunks.push_back(m);
  }
  // Evaluation runs forward-only lists of up to a step's micro-batches (runtime/evaluator.hpp) with buffers of
  // its own, from any step boundary: its spares come on top, its slots from the same pools.
  int evaluation_spares = 0;
  std::vector<int> evaluation_slots(s.chunks, 0);
  if (!plan.evaluation.buffers.empty())
    for (const auto& boundary : plan.evaluation.buffers.at(replica).at(stage))
      for (const schedule::BufferPlan& list : boundary) {
        evaluation_spares = std::max(evaluation_spares, list.message_buffers);
        for (int c = 0; c < s.chunks; ++c) evaluation_slots[c] = std::max(evaluation_slots[c], list.slots.at(c));
      }
  for (int c = 0; c < s.chunks; ++c)
    if (evaluation_slots[c] > r.chunks[c].slots) {
      add(Category::activations, (evaluation_slots[c] - r.chunks[c].slots) * r.chunks[c].slot_bytes);
      r.chunks[c].slots = evaluation_slots[c];
    }
  r.message_buffers = buffers.message_buffers;
  r.evaluation_buffers = evaluation_spares;
  add(Category::messages, std::int64_t(r.message_buffers + r.evaluation_buffers) * message_bytes);
  // The trainer's host staging rows of tokens (inputs, targets) for each micro-batch a step forwards, and its
  // per-micro-batch loss sums on the device.
  const std::int64_t staged = schedule::staged_microbatches(s);
  add(Category::workspaces, 2 * staged * rows * std::int64_t(sizeof(Token)) +
                                std::int64_t(config.train.microbatches) * std::int64_t(sizeof(double)));
  return r;
}

RankMemory plan_rank(const Config& config, const model::ModelDesc& desc, const schedule::Plan& schedule,
                     int replica, int stage) {
  return config.train.precision == Precision::bf16 ? plan_rank_for<float, bf16>(config, desc, schedule, replica, stage)
                                                   : plan_rank_for<float, float>(config, desc, schedule, replica, stage);
}

std::vector<RankMemory> plan_ranks(const Config& config, const model::ModelDesc& desc, const schedule::Plan& schedule) {
  std::vector<RankMemory> ranks;
  for (int replica = 0; replica < schedule.run.replica_count(); ++replica)
    for (int stage = 0; stage < config.pipeline.pipeline_size; ++stage)
      ranks.push_back(plan_rank(config, desc, schedule, replica, stage));
  return ranks;
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template RankMemory plan_rank_for<T, A>(const Config&, const model::ModelDesc&, const schedule::Plan&, int, int);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

std::string describe(const Bytes& bytes) {
  std::string text;
  for (Category c : all_categories) {
    if (bytes[int(c)] == 0) continue;
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", to_string(c), format_bytes(bytes[int(c)]));
  }
  return text;
}

}  // namespace kpipe::memory
