#pragma once
// How a rank's buffers follow its list of actions, decided here from the list alone (never by timing), down to
// the index each action uses: the runtime (runtime/buffers.hpp) follows these indices and decides nothing, and
// the memory plan (memory/plan.hpp) reads its pools' sizes from the same plan, so what is predicted is what
// is allocated, on every run. The rules:
//  - three kinds of pool, each handing out its lowest free index and growing by one when none is free: a
//    chunk's activation slots, a chunk's sets of backward buffers, and the rank's spare [N, C] message buffers
//    (a spare is given back to the lowest empty place);
//  - receives are posted ahead (buffered delivery): before each compute action, the receives up to two
//    positions past the next compute action; stream-ordered delivery posts each at its own position (a receive
//    posted ahead would hold the stream until its data arrived), as it does a receive not posted ahead; each
//    lands in a spare;
//  - a forward takes a slot for its micro-batch and swaps the received activation into it, a backward the
//    received gradient: the slot's own buffer becomes a spare;
//  - backward_input takes a set of backward buffers, backward_weight gives it back (B: both);
//  - a send is waited on at its delivery point (delivery.hpp); after the last action that touches a
//    micro-batch's slot on a chunk (its own last action, or the forward of the next virtual stage on the same
//    rank, which reads the slot's output: forward-only lists end a micro-batch there) the slot goes back to the
//    pool, and a send that still reads from the slot takes its buffer along, a spare taking its place; the
//    buffer becomes a spare again at the send's delivery point.
// A step ends with every send delivered and every buffer back, so each step needs what the first did.
// Asynchronous lists (several steps, no flush) keep micro-batches in flight across step boundaries: their
// slots and received buffers stay, but each step posts only its own receives and waits for its own sends by
// its end S, so every step runs on its own. A long run repeats their template step (asynchronous.hpp), running
// the indices planned for it every time: the step ends by renumbering the slots (a permutation of the chunk's
// slot pointers, nothing copied) so that it leaves them as it found them, shifted by a step's micro-batches,
// and the plan checks that every other buffer is left so too.
#include <cstddef>
#include <vector>

#include "kpipe/schedule/routes.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// Per chunk, the slots in use (ascending): those micro-batches in flight hold at a step boundary.
using HeldSlots = std::vector<std::vector<int>>;

// A send that still reads a retired slot keeps the slot's buffer; a spare takes its place in the slot.
struct Detach {
  std::size_t send = 0;  // the send's position
  int spare = 0;
};

struct BufferPlan {
  // Per position of the list:
  // Receives posted ahead before running it (their positions); one not posted ahead is posted at its own.
  std::vector<std::vector<std::size_t>> post_before;
  std::vector<std::vector<int>> retire;    // after it: the chunks whose slot of its micro-batch goes back to the
                                           // pool (the last action touching that slot)
  std::vector<std::vector<Detach>> detach; // after it, as those slots go back: the sends that keep their buffers
  std::vector<std::size_t> delivered_after;  // a send's delivery point (list size otherwise; asynchronous: at the
                                             // latest its step's S)
  std::vector<int> slot;          // F: the slot its micro-batch takes on its chunk; -1 elsewhere
  std::vector<int> backward_set;  // B, I: the set of backward buffers it takes; -1 elsewhere
  // A receive: the spare it lands in; F, B or I that swaps a received buffer in: the spare the slot's former
  // buffer becomes; a send that detached: the spare its buffer becomes once delivered; -1 elsewhere.
  std::vector<int> spare;
  // The step a long asynchronous run repeats ends (after its S, at position renumber_after; the list's size
  // when no step repeats) by renumbering each chunk's slots: slot k becomes renumbering[chunk][k], so that the
  // step leaves its micro-batches in flight in the slots their predecessors held when it began.
  std::size_t renumber_after = 0;
  std::vector<std::vector<int>> renumbering;
  // Per step of the list (one for synchronous lists): the slots held when it ends (none after the last).
  std::vector<HeldSlots> held_after_step;
  std::vector<int> slots;          // per chunk: activation slots its pool reaches
  std::vector<int> backward_sets;  // per chunk: sets of backward buffers its pool reaches
  int message_buffers = 0;         // spare [N, C] buffers allocated
};

// For `list`, rank `rank`'s actions of the lowered schedule s (possibly rewritten by a pass), on a transport
// of that delivery. `held`: slots already in use when the list starts (forward-only lists run between the
// steps of an asynchronous run, on the same chunks); none by default. plan.hpp plans every rank's.
BufferPlan plan_buffers(const Schedule& s, int rank, const std::vector<Action>& list,
                        Delivery delivery = Delivery::buffered, const HeldSlots& held = {});

}  // namespace kpipe::schedule
