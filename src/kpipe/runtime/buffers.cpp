#include "kpipe/runtime/buffers.hpp"

#include "kpipe/core/memory_category.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::runtime {

template <class T, class A>
Buffers<T, A>::Buffers(std::vector<model::Chunk<T, A>*> chunks, int microbatches)
    : chunks_(std::move(chunks)), microbatches_(microbatches) {
  const std::size_t n = chunks_.size();
  slot_.assign(n, std::vector<int>(microbatches_, -1));
  for (auto& arrived : arrived_) arrived.assign(n, std::vector<View2<A>>(microbatches_));
}

template <class T, class A> void Buffers<T, A>::begin_run() {
  std::vector<Send> active;
  for (auto& s : sends_)
    if (s.transfer.active() || s.detached.data() != nullptr) active.push_back(std::move(s));
  sends_ = std::move(active);
}

template <class T, class A> int Buffers<T, A>::take_slot(int chunk, int microbatch) {
  int& s = slot_[chunk][microbatch % microbatches_];
  if (s < 0) s = chunks_[chunk]->acquire();
  return s;
}

// An [N, C] buffer from the spares (all chunks' activations have that shape), allocated when none is left:
// the number allocated follows from the schedule alone, and after the first step it is enough.
template <class T, class A> View2<A> Buffers<T, A>::take_spare() {
  if (spares_.empty()) {
    memory::Scope scope(memory::Category::messages);
    ++allocated_;
    const auto& chunk = *chunks_.front();
    return View2<A>(uninitialized("kpipe::runtime::Buffers::message"), chunk.rows(), chunk.channels());
  }
  View2<A> spare = spares_.back();
  spares_.pop_back();
  return spare;
}

template <class T, class A> View2<A> Buffers<T, A>::receive_buffer(int chunk, int microbatch, bool gradient) {
  return arrived_[gradient][chunk][microbatch % microbatches_] = take_spare();
}

template <class T, class A> void Buffers<T, A>::move_in_activation(int chunk, int microbatch) {
  View2<A>& received = arrived_[0][chunk][microbatch % microbatches_];
  if (received.data() == nullptr) return;
  chunks_[chunk]->swap_input(slot_[chunk][microbatch % microbatches_], received);  // received now holds the former buffer
  spares_.push_back(received);
  received = View2<A>();
}

template <class T, class A> void Buffers<T, A>::move_in_gradient(int chunk, int microbatch) {
  View2<A>& received = arrived_[1][chunk][microbatch % microbatches_];
  if (received.data() == nullptr) return;
  chunks_[chunk]->swap_output_grad(slot_[chunk][microbatch % microbatches_], received);
  spares_.push_back(received);
  received = View2<A>();
}

template <class T, class A>
comm::Transfer& Buffers<T, A>::add_send(const schedule::Action& action, bool gradient, std::size_t delivered_after) {
  const int chunk = action.chunk;
  sends_.push_back({action, chunk, slot_[chunk][action.microbatch % microbatches_], gradient, delivered_after, {}, {}});
  return sends_.back().transfer;
}

// Only the schedule decides when a buffer comes back, never how fast a peer happened to be, so the number
// of buffers allocated is the same on every run.
template <class T, class A>
const schedule::Action* Buffers<T, A>::reclaim(std::size_t done, comm::Transport& transport, const ExecSpace& space,
                                               double timeout_s) {
  for (auto& s : sends_) {
    if (s.transfer.active() && s.delivered_after <= done && !transport.wait(space, s.transfer, timeout_s))
      return &s.action;
    if (!s.transfer.active() && s.detached.data() != nullptr) {
      spares_.push_back(s.detached);
      s.detached = View2<A>();
    }
  }
  return nullptr;
}

// A slot never waits for the network, and the pool stays as small as the stash (the spares are one [N, C]
// buffer per send in flight, not a whole stash each).
template <class T, class A> void Buffers<T, A>::retire(int chunk, int microbatch) {
  const int slot = slot_[chunk][microbatch % microbatches_];
  auto& owner = *chunks_[chunk];
  for (auto& s : sends_) {
    if (s.chunk != chunk || s.slot != slot || s.detached.data() != nullptr || !s.transfer.active()) continue;
    View2<A> spare = take_spare();
    if (s.gradient)
      owner.swap_input_grad(slot, spare);
    else
      owner.swap_output(slot, spare);
    s.detached = spare;  // after the swap: the buffer the send reads
  }
  owner.release(slot);
  slot_[chunk][microbatch % microbatches_] = -1;
}

#define KPIPE_INSTANTIATE(T, A) template class Buffers<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
