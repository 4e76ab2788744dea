#pragma once
// How a rank's buffers follow its list of actions, fixed by the list alone (never by timing), so that what
// the runtime allocates can be predicted exactly (memory/plan.hpp) and is the same on every run:
//  - receives are posted ahead: before each compute action, the receives up to two positions past the next
//    compute action; each lands in a spare [N, C] message buffer;
//  - a forward takes a slot from its chunk's pool (the lowest free one) and swaps the received activation
//    into it, a backward the received gradient: the slot's own buffer becomes a spare;
//  - backward_input takes a set of backward buffers from its chunk's pool, backward_weight gives it back;
//  - a send is waited on at its delivery point (delivery.hpp); after the last action that touches a
//    micro-batch's slot on a chunk (its own last action, or the forward of the next virtual stage on the same
//    rank, which reads the slot's output: forward-only lists end a micro-batch there) the slot goes back to the pool, and a send that still reads from the slot takes its buffer along, a
//    spare taking its place; the buffer becomes a spare again at the send's delivery point.
// A step ends with every send delivered and every buffer back, so each step needs what the first did.
// Asynchronous lists (several steps, no flush) keep micro-batches in flight across step boundaries: their
// slots and received buffers stay, but each step posts only its own receives and waits for its own sends by
// its end S, so every step runs on its own and a long run repeats the pools of the lists' steps.
#include <cstddef>
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct BufferPlan {
  std::vector<std::vector<std::size_t>> post_before;  // per position: receives to post before running it
  // Per position: the chunks whose slot of the action's micro-batch goes back to the pool after it (the last
  // action touching that slot).
  std::vector<std::vector<int>> retire;
  std::vector<std::size_t> delivered_after;           // per position: a send's delivery point (list size otherwise;
                                                      // asynchronous: at the latest its step's S)
  std::vector<int> slots;          // per chunk: activation slots its pool reaches
  std::vector<int> backward_sets;  // per chunk: sets of backward buffers its pool reaches
  int message_buffers = 0;         // spare [N, C] buffers allocated
};

// For `list`, rank `rank`'s actions of the lowered schedule s (possibly rewritten by a pass).
BufferPlan plan_buffers(const Schedule& s, int rank, const std::vector<Action>& list);

}  // namespace kpipe::schedule
