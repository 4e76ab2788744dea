#pragma once
// Where a send is known to have been delivered: the point in the sender's own list after which waiting on
// it returns at once. An executor that waits there (and only there) reuses message buffers at points the
// schedule fixes, never when the network happens to be done, and cannot deadlock on the wait.
#include <cstddef>
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// For each send in `list` (rank `rank`'s actions of the lowered schedule s, possibly with its computations
// reordered), the index in `list` of the first later receive from the same peer that the peer sends only
// after its own receive of ours: once that receive has completed, the peer has received our message.
// list.size() for non-sends and for sends with no such receive in the step (done at the step's end).
std::vector<std::size_t> delivery_points(const Schedule& s, int rank, const std::vector<Action>& list);

}  // namespace kpipe::schedule
