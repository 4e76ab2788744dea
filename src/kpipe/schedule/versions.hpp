#pragma once
// Weight versions in a schedule's lists: which versions a rank holds as it runs its list, the checks of the
// version rules, and the plan the runtime follows (runtime/weight_versions.hpp), so that the versions the
// runtime holds are the ones counted here (tested).
//
// A version is held from the update U that produces it (or from the start of the lists) until the later
// of its last reader (F, B, I or W) and the update that replaces it as the newest: the newest version is
// always held, it is the weights. An update starts from the newest version; when that one is still read
// later (a micro-batch in flight, or to come, reads it) it is kept and the new version takes another
// buffer, otherwise the update writes over it.
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct VersionPlan {
  std::vector<std::vector<int>> free_after;  // per position: versions of that action's chunk nobody reads later
  std::vector<bool> keeps_base;              // per position of a U: the version it starts from is read later
  std::vector<int> peak;                     // per chunk: most versions held at once
};

// For `list`, rank `rank`'s actions of s (compute-only or lowered, possibly rewritten by a pass).
VersionPlan plan_versions(const Schedule& s, int rank, const std::vector<Action>& list);

// Per rank: the most versions one of its chunks holds at once (1 for synchronous schedules).
std::vector<int> versions_held(const Schedule& s);

// The version rules (InputError naming rank, position and action; validate() calls it):
//  - synchronous schedules: no U, every version 0;
//  - asynchronous ones, per rank and chunk: a forward reads a version the rank holds (produced by an
//    earlier U, or held at the start); a backward (B, I, W) reads exactly its forward's version; each U
//    produces the version after the newest and applies the weight gradients since the previous U, which
//    are those of the micro-batches after the previous U's up to its own (PipeDream: one; 2BW: a window of m),
//    and every weight gradient is applied by the end; every step ends (S) with the updates of its m
//    micro-batches applied; each forward reads what the rule says (asynchronous.hpp), and under vertical
//    sync every stage reads for a micro-batch the version the first stage read; at most versions_bound()
//    versions held at once.
void validate_versions(const Schedule& s);

}  // namespace kpipe::schedule
