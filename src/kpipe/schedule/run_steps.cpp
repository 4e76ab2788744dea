#include "kpipe/schedule/run_steps.hpp"

#include <algorithm>

#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {

int template_step(const Schedule& lists) {
  return lists.asynchronous() ? Horizon{lists.ranks, lists.microbatches}.template_step() : 0;
}

int staged_microbatches(const Schedule& lists) {
  return lists.microbatches + (lists.asynchronous() ? lists.ranks - 1 : 0);
}

std::vector<int> run_stash(const Replicated& run, std::int64_t run_steps) {
  const Schedule& lists = run.replicas.front();
  if (lists.asynchronous()) return stash_bound(lists.ranks, lists.microbatches, run_steps);
  std::vector<int> held;
  for (const auto& replica : run.replicas) {
    const auto peak = peak_stash(replica);
    held.resize(std::max(held.size(), peak.size()), 0);
    for (std::size_t r = 0; r < peak.size(); ++r) held[r] = std::max(held[r], peak[r]);
  }
  return held;
}

}  // namespace kpipe::schedule
