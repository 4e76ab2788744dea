#include "kpipe/memory/plan.hpp"

#include "kpipe/schedule/versions.hpp"

#include <fmt/format.h>

#include "kpipe/core/bytes.hpp"
#include "kpipe/nn/block.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/forward_only.hpp"

namespace kpipe::memory {

namespace {

// What model::Chunk allocates for layers [first, last), in bytes (chunk.cpp, nn/block.cpp, nn/head.cpp).
ChunkMemory chunk_memory(const model::ModelDesc& desc, int first, int last, int sequences, nn::Recompute recompute,
                         std::size_t e) {
  const auto& c = desc.config;
  const std::int64_t n = std::int64_t(sequences) * c.seq_len, width = c.d_model, vocab = c.vocab;
  const nn::AttentionShape shape{sequences, c.seq_len, c.n_heads, c.d_model / c.n_heads};
  const int hidden = c.mlp_ratio * c.d_model;
  const bool has_first = first == 0, has_last = last == int(desc.layers.size());
  int blocks = 0;
  ChunkMemory m;
  m.first_layer = first;
  m.last_layer = last;
  for (int l = first; l < last; ++l) {
    m.parameters += desc.layers[l].num_params();
    if (desc.layers[l].kind == model::LayerKind::block) ++blocks;
  }
  const std::int64_t token = sizeof(Token);
  // Activation slot: what the micro-batch keeps from its forward until it is done.
  std::int64_t slot = 0;
  if (has_first) slot += n * token + n * width * e;         // tokens, embedding output
  else slot += 2 * n * width * e;                           // input, input gradient
  slot += blocks * nn::stash_elements(nn::kept_fields(recompute), shape, hidden) * std::int64_t(e);
  if (has_last) slot += n * token + (n * width + 3 * n + n * vocab) * e;  // targets; h, mean, rstd, logits, losses
  else slot += n * width * e;                               // output gradient
  m.slot_bytes = slot;
  // Backward buffers: inner gradients, recomputed activations backward_weight reads, gradients between layers.
  std::int64_t back = blocks * (nn::grads_elements(shape, hidden) +
                                nn::stash_elements(nn::weight_fields(recompute), shape, hidden)) * std::int64_t(e);
  if (has_last) back += n * width * e;  // the head's dh
  back += std::int64_t(last - first - 1) * n * width * e;
  m.backward_bytes = back;
  if (blocks > 0) {
    const unsigned dropped = nn::stash_field::all & ~nn::kept_fields(recompute);
    m.workspace_bytes = (nn::work_elements(shape) + (dropped ? nn::stash_elements(dropped, shape, hidden) : 0)) *
                        std::int64_t(e);
  }
  return m;
}

}  // namespace

RankMemory plan_rank(const Config& config, const model::ModelDesc& desc, const schedule::Replicated& replicated,
                     int replica, int stage, std::size_t e) {
  const auto& pc = config.pipeline;
  const schedule::Schedule& s = replicated.replicas.at(replica);
  const int sequences = config.train.batch / config.train.microbatches;
  const std::int64_t rows = std::int64_t(sequences) * config.model.seq_len;
  const nn::Recompute recompute = config.memory.recompute;
  const auto ranges = partition::configured_partition(config, desc, replicated);
  const auto buffers = schedule::plan_buffers(s, stage, s.actions.at(stage));
  // Asynchronous schedules keep copies of the weight versions they hold (runtime/weight_versions.hpp), as
  // many as the lists hold at once (schedule/versions.hpp); synchronous ones keep none.
  const auto versions = schedule::plan_versions(s, stage, s.actions.at(stage));

  RankMemory r;
  r.replica = replica;
  r.stage = stage;
  r.world_rank = replica * pc.pipeline_size + stage;
  auto add = [&](Category category, std::int64_t bytes) { r.bytes[int(category)] += bytes; };
  for (int c = 0; c < s.chunks; ++c) {
    const auto& range = ranges.at(s.virtual_stage(stage, c));
    ChunkMemory m = chunk_memory(desc, range.first, range.last, sequences, recompute, e);
    m.slots = buffers.slots.at(c);
    m.backward_sets = buffers.backward_sets.at(c);
    add(Category::parameters, m.parameters * std::int64_t(e));
    add(Category::gradients, m.parameters * std::int64_t(e));
    // Asynchronous schedules summing replicas in order: the buffer the sum of the replicas before arrives in.
    if (s.asynchronous() && replicated.replica_count() > 1 && pc.dp_reduction == DpReduction::ordered && replica > 0)
      add(Category::gradients, m.parameters * std::int64_t(e));
    add(Category::optimizer, m.parameters * (2 * std::int64_t(e) + 1));
    if (s.asynchronous()) add(Category::weight_versions, versions.peak.at(c) * m.parameters * std::int64_t(e));
    add(Category::activations, m.slots * m.slot_bytes);
    add(Category::backward, m.backward_sets * m.backward_bytes);
    add(Category::workspaces, m.workspace_bytes);
    r.chunks.push_back(m);
  }
  // Evaluation runs forward-only lists of up to a step's micro-batches (runtime/evaluator.hpp) with buffers of
  // its own: its spares come on top, its slots from the same pools.
  int evaluation_spares = 0;
  std::vector<int> evaluation_slots(s.chunks, 0);
  for (int n = 1; n <= s.microbatches; ++n) {
    const schedule::Schedule list = schedule::forward_only(s, n);
    const auto plan = schedule::plan_buffers(list, stage, list.actions.at(stage));
    evaluation_spares = std::max(evaluation_spares, plan.message_buffers);
    for (int c = 0; c < s.chunks; ++c) evaluation_slots[c] = std::max(evaluation_slots[c], plan.slots.at(c));
  }
  for (int c = 0; c < s.chunks; ++c)
    if (evaluation_slots[c] > r.chunks[c].slots) {
      add(Category::activations, (evaluation_slots[c] - r.chunks[c].slots) * r.chunks[c].slot_bytes);
      r.chunks[c].slots = evaluation_slots[c];
    }
  r.message_buffers = buffers.message_buffers;
  r.evaluation_buffers = evaluation_spares;
  add(Category::messages,
      std::int64_t(r.message_buffers + r.evaluation_buffers) * rows * config.model.d_model * std::int64_t(e));
  // The trainer's host staging rows of tokens (inputs, targets) for each of its micro-batches, and its
  // per-micro-batch loss sums on the device.
  // (asynchronous schedules: the m + p - 1 micro-batches a step may forward)
  const std::int64_t staged = s.microbatches + (s.asynchronous() ? s.ranks - 1 : 0);
  add(Category::workspaces, 2 * staged * rows * std::int64_t(sizeof(Token)) +
                                std::int64_t(config.train.microbatches) * std::int64_t(sizeof(double)));
  return r;
}

std::vector<RankMemory> plan_ranks(const Config& config, const model::ModelDesc& desc,
                                   const schedule::Replicated& schedule, std::size_t e) {
  std::vector<RankMemory> ranks;
  for (int replica = 0; replica < schedule.replica_count(); ++replica)
    for (int stage = 0; stage < config.pipeline.pipeline_size; ++stage)
      ranks.push_back(plan_rank(config, desc, schedule, replica, stage, e));
  return ranks;
}

std::string describe(const Bytes& bytes) {
  std::string text;
  for (Category c : all_categories) {
    if (bytes[int(c)] == 0) continue;
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", to_string(c), format_bytes(bytes[int(c)]));
  }
  return text;
}

}  // namespace kpipe::memory
