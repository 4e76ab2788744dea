#pragma once
// Who holds which activation buffer on a rank during a step: the one owner of the slots micro-batches are
// given, the spare [N, C] message buffers receives land in, the buffers received but not yet used, and the
// sends in flight with the buffers they read. It follows the rules of schedule/buffers.hpp, whose
// plan_buffers() predicts from the list alone what this allocates (memory/plan.hpp; tested against the
// allocations Kokkos reports). Receives and sends themselves are the trainer's; it asks here for buffers.
#include <cstddef>
#include <vector>

#include "kpipe/comm/transport.hpp"
#include "kpipe/model/chunk.hpp"
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

  // The slot of (chunk, micro-batch): -1 before its forward; take_slot gives it one from the chunk's pool.
  int slot(int chunk, int microbatch) const { return slot_[chunk][microbatch % microbatches_]; }
  int take_slot(int chunk, int microbatch);

  // A spare buffer for a receive posted ahead; it stays "arrived" for (chunk, micro-batch) until moved in.
  View2<A> receive_buffer(int chunk, int microbatch, bool gradient);
  // The arrived activation becomes the slot's input, the arrived gradient its output gradient (when one
  // arrived: local handoffs arrive in place); the slot's former buffer becomes a spare.
  void move_in_activation(int chunk, int microbatch);
  void move_in_gradient(int chunk, int microbatch);

  // A send (`action`) of the slot's output (activation) or input gradient starts: where the transport's
  // Transfer goes.
  comm::Transfer& add_send(const schedule::Action& action, bool gradient, std::size_t delivered_after);
  // After position `done`: waits on the sends delivered by then (through `transport`, each at most timeout_s), and
  // their detached buffers become spares. Returns the send that did not complete in time, if one did not.
  const schedule::Action* reclaim(std::size_t done, comm::Transport& transport, const ExecSpace& space,
                                  double timeout_s);
  // The micro-batch is done on the chunk: its slot goes back to the pool, a send still reading from it
  // taking its buffer along (a spare takes its place in the slot).
  void retire(int chunk, int microbatch);

  int message_buffers() const { return allocated_; }  // spares allocated since construction

 private:
  View2<A> take_spare();

  struct Send {
    schedule::Action action;
    int chunk, slot;
    bool gradient;
    std::size_t delivered_after;
    comm::Transfer transfer;
    View2<A> detached;  // empty while the send reads from its slot
  };
  std::vector<model::Chunk<T, A>*> chunks_;
  int microbatches_;
  std::vector<std::vector<int>> slot_;                      // [chunk][micro-batch] -> slot, -1 when none
  std::vector<std::vector<View2<A>>> arrived_[2];           // [activation, gradient][chunk][micro-batch]
  std::vector<Send> sends_;                                 // this step's, in order
  std::vector<View2<A>> spares_;
  int allocated_ = 0;
};

}  // namespace kpipe::runtime
