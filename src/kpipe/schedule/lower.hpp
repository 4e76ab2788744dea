#pragma once
// Lowering: the messages a schedule needs, as actions.
//
// After the F of a virtual stage that is not the last comes a send of its output to the next virtual
// stage's rank, and right before the F of a virtual stage that is not the first, the matching receive;
// gradients likewise in the other direction (after B or I a send to the previous virtual stage's rank,
// before B or I a receive from the next one's). Where both virtual stages live on the same rank (p = 1 with
// several chunks) the data is handed over locally and there is no message.
//
// Convention for receives: a receive action marks the point by which the data must have arrived, not the
// point where it is requested. Every message is named by (direction, micro-batch, receiving chunk)
// (message_tag), so an executor may post receives as early as it likes — all of a step's at its start,
// or a window of the next few — and wait at the receive action. Sends are non-blocking: the executor
// keeps the buffer until the send completes.
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// The schedule with its messages inserted; a schedule that already has messages is returned unchanged.
Schedule lower(const Schedule& s);

// The compute actions and steps only (the inverse of lower()).
Schedule strip_messages(const Schedule& s);

}  // namespace kpipe::schedule
