#include "kpipe/schedule/forward_only.hpp"

#include <fmt/format.h>

#include "kpipe/core/error.hpp"

namespace kpipe::schedule {

Plan forward_only(const Schedule& placement, int microbatches, Delivery delivery) {
  require(microbatches >= 1, "forward-only list of {} micro-batches", microbatches);
  Schedule s;
  s.ranks = placement.ranks;
  s.chunks = placement.chunks;
  s.placement = placement.placement;
  s.microbatches = microbatches;
  s.forward_only = true;
  s.actions.resize(s.ranks);
  for (int k = 0; k < microbatches; ++k)
    for (int v = 0; v < s.virtual_stages(); ++v) s.actions[s.rank_of(v)].push_back({Op::forward, k, s.chunk_of(v), -1});
  for (auto& list : s.actions) list.push_back({Op::step, 0, 0, -1});
  return plan(s, fmt::format("forward_only (p = {}, m = {}, v = {})", s.ranks, microbatches, s.chunks), Replication{},
              delivery);
}

Evaluation plan_evaluation(const Plan& training, int microbatches) {
  Evaluation e;
  for (int n = 1; n <= microbatches; ++n)
    e.lists.push_back(forward_only(training.run.replicas.front(), n, training.delivery).run.replicas.front());
  for (const auto& replica : training.buffers) {
    auto& ranks = e.buffers.emplace_back();
    for (std::size_t rank = 0; rank < replica.size(); ++rank) {
      auto& steps = ranks.emplace_back();
      for (const HeldSlots& held : replica[rank].held_after_step) {
        auto& plans = steps.emplace_back();
        for (const Schedule& list : e.lists)
          plans.push_back(plan_buffers(list, int(rank), list.actions.at(rank), training.delivery, held));
      }
    }
  }
  return e;
}

}  // namespace kpipe::schedule
