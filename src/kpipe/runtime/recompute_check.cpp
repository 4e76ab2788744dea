#include "kpipe/runtime/recompute_check.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/order_free_hash.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/core/step_number.hpp"

namespace kpipe::runtime {

template <class T, class A> void RecomputeCheck<T, A>::arm(std::int64_t step) {
  step_ = step;
  done_.assign(std::size_t(stage_->chunks()), false);
  mismatch_microbatch_ = mismatch_chunk_ = -1;
}

template <class T, class A> std::uint64_t RecomputeCheck<T, A>::output_hash(int c, int slot) const {
  const auto& chunk = stage_->chunk(c);
  const ExecSpace space;
  if (chunk.last()) {
    const auto logits = chunk.logits(slot);
    return order_free_hash(space, logits.data(), std::int64_t(logits.span()), 0, 1);
  }
  const auto& output = chunk.output(slot);
  return order_free_hash(space, output.data(), std::int64_t(output.span()), 0, 1);
}

template <class T, class A> void RecomputeCheck<T, A>::observe(const schedule::Action& a, int slot) {
  if (a.op != schedule::Op::forward || done_.empty() || done_.at(std::size_t(a.chunk))) return;
  done_[std::size_t(a.chunk)] = true;
  // The slot still holds the forward's inputs and the weights it read are bound: the same forward again.
  const std::uint64_t first = output_hash(a.chunk, slot);
  stage_->chunk(a.chunk).forward(ExecSpace(), slot);
  if (output_hash(a.chunk, slot) != first && mismatch_chunk_ < 0) {
    mismatch_microbatch_ = a.microbatch;
    mismatch_chunk_ = a.chunk;
  }
}

template <class T, class A> std::optional<SilentCorruption> RecomputeCheck<T, A>::verdict() {
  const auto& grid = stage_->grid();
  const std::int64_t step = step_;
  done_.clear();  // disarmed
  const auto all = comm::allgather(std::vector<int>{mismatch_microbatch_, mismatch_chunk_}, grid.world,
                                   {stage_->config().pipeline.recv_timeout_s,
                                    fmt::format("the recomputation check of step {}", step_number(step)), grid.nodes});
  SilentCorruption corruption;
  std::string ranks;
  for (int r = 0; r < grid.world_size; ++r) {
    const int microbatch = all[std::size_t(2 * r)], chunk = all[std::size_t(2 * r + 1)];
    if (chunk < 0) continue;
    corruption.ranks.push_back(r);
    const std::string node = grid.node_of(r);
    if (std::find(corruption.nodes.begin(), corruption.nodes.end(), node) == corruption.nodes.end())
      corruption.nodes.push_back(node);
    ranks += fmt::format("{}rank {} (stage {} on node {}: micro-batch {}, chunk {})", ranks.empty() ? "" : ", ", r,
                         r % grid.pipeline_size, node, microbatch, chunk);
  }
  if (corruption.ranks.empty()) return std::nullopt;
  corruption.what = fmt::format("a forward computed twice gave different bytes in step {}: {}", step_number(step), ranks);
  return corruption;
}

#define KPIPE_INSTANTIATE(T, A) template class RecomputeCheck<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
