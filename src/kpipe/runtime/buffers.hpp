#pragma once
// Who holds which activation buffer on a rank during a run: the slots micro-batches are given, the spare
// [N, C] message buffers receives land in, the buffers received but not yet used, and the sends in flight with
// the buffers they read. It decides nothing: every slot, set of backward buffers and spare is the one the
// buffer plan (schedule/buffers.hpp) names for the action, and the plan says which sends keep a retired slot's
// buffer, so what this allocates is what the memory plan (memory/plan.hpp) read from the same plan. A call that
// contradicts what it holds (a spare taken while empty, a slot in use) is a std::logic_error: a plan not followed.
// Receives and sends themselves are the executor's; it asks here for buffers.
#include <cstddef>
#include <vector>

#include "kpipe/comm/transport.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class Buffers {
 public:
  // The rank's chunks (they outlive this), and how many micro-batches are told apart: micro-batches are known
  // modulo it (more than are ever in flight at once; lists numbered over many steps give their tag period).
  Buffers(std::vector<model::Chunk<T, A>*> chunks, int microbatches);

  // Before a run: the sends earlier runs delivered are dropped. Micro-batches still in flight (lists that run
  // on across a step boundary) keep their slots and received buffers; a list that ended left none.
  void begin_run();

  // The slot of (chunk, micro-batch): -1 before its forward; take_slot gives it slot `slot` of the chunk's pool.
  int slot(int chunk, int microbatch) const { return slot_[chunk][microbatch % microbatches_]; }
  void take_slot(int chunk, int microbatch, int slot);

  // Spare `spare` (allocated when it is the next new one) for a receive posted ahead; it stays "arrived" for
  // (chunk, micro-batch) until moved in.
  View2<A> receive_buffer(int chunk, int microbatch, bool gradient, int spare);
  // The arrived activation becomes the slot's input, the arrived gradient its output gradient (when one
  // arrived: local handoffs arrive in place); the slot's former buffer becomes spare `spare`.
  void move_in_activation(int chunk, int microbatch, int spare);
  void move_in_gradient(int chunk, int microbatch, int spare);

  // A send (`action`, at `position` of its list) of the slot's output (activation) or input gradient starts:
  // where the transport's Transfer goes. Delivered after position `delivered_after`; its buffer, if a retired
  // slot leaves it to the send, becomes spare `returns_to` then.
  comm::Transfer& add_send(const schedule::Action& action, std::size_t position, std::size_t delivered_after,
                           int returns_to);
  // After position `done`: waits on the sends delivered by then (through `transport`, each at most timeout_s),
  // and their detached buffers become spares. Returns the send that did not complete in time, if one did not.
  const schedule::Action* reclaim(std::size_t done, comm::Transport& transport, const ExecSpace& space,
                                  double timeout_s);
  // The micro-batch is done on the chunk: its slot goes back to the pool, the sends `detach` names taking its
  // buffers along (each replaced in the slot by the spare it names).
  void retire(int chunk, int microbatch, const std::vector<schedule::Detach>& detach);
  // Slot k of chunk c becomes renumbering[c][k] (the plan's, at the end of the step a long run repeats).
  void renumber(const std::vector<std::vector<int>>& renumbering);

  int message_buffers() const { return int(spares_.size()); }  // spares allocated since construction

 private:
  View2<A> take_spare(int spare);
  void give_spare(int spare, View2<A> buffer);

  struct Send {
    schedule::Action action;
    std::size_t position, delivered_after;
    int returns_to;
    comm::Transfer transfer;
    bool delivered = false;
    View2<A> detached;  // empty while the send reads from its slot
  };
  std::vector<model::Chunk<T, A>*> chunks_;
  int microbatches_;
  std::vector<std::vector<int>> slot_;             // [chunk][micro-batch] -> slot, -1 when none
  std::vector<std::vector<View2<A>>> arrived_[2];  // [activation, gradient][chunk][micro-batch]
  std::vector<Send> sends_;                        // this run's, and earlier runs' not yet delivered, in order
  std::vector<View2<A>> spares_;                   // by the plan's spare index; empty while its buffer is out
};

}  // namespace kpipe::runtime
