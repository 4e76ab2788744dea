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

}  // namespace kpipe::schedule
