#include "kpipe/runtime/buffers.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

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
  std::vector<Send> under_way;
  for (auto& s : sends_)
    if (!s.delivered) under_way.push_back(std::move(s));
  sends_ = std::move(under_way);
}

template <class T, class A> void Buffers<T, A>::take_slot(int chunk, int microbatch, int slot) {
  int& held = slot_[chunk][microbatch % microbatches_];
  if (held >= 0) return;  // a micro-batch keeps its slot
  chunks_[chunk]->acquire(slot);
  held = slot;
}

// An [N, C] buffer (all chunks' activations have that shape): the plan's spare, allocated the first time the
// plan names it. How many are allocated follows from the schedule alone, and after the first step it is enough.
template <class T, class A> View2<A> Buffers<T, A>::take_spare(int spare) {
  if (spare == int(spares_.size())) {
    memory::Scope scope(memory::Category::messages);
    spares_.emplace_back();
    const auto& chunk = *chunks_.front();
    return View2<A>(uninitialized("kpipe::runtime::Buffers::message"), chunk.rows(), chunk.channels());
  }
  View2<A> buffer = std::exchange(spares_.at(spare), View2<A>());
  if (buffer.data() == nullptr) throw std::logic_error(fmt::format("Buffers: spare {} taken while empty", spare));
  return buffer;
}

template <class T, class A> void Buffers<T, A>::give_spare(int spare, View2<A> buffer) {
  View2<A>& place = spares_.at(spare);
  if (place.data() != nullptr) throw std::logic_error(fmt::format("Buffers: spare {} given back while full", spare));
  place = std::move(buffer);
}

template <class T, class A>
View2<A> Buffers<T, A>::receive_buffer(int chunk, int microbatch, bool gradient, int spare) {
  return arrived_[gradient][chunk][microbatch % microbatches_] = take_spare(spare);
}

template <class T, class A> void Buffers<T, A>::move_in_activation(int chunk, int microbatch, int spare) {
  View2<A>& received = arrived_[0][chunk][microbatch % microbatches_];
  if (received.data() == nullptr) return;
  chunks_[chunk]->swap_input(slot(chunk, microbatch), received);  // received now holds the former buffer
  give_spare(spare, std::exchange(received, View2<A>()));
}

template <class T, class A> void Buffers<T, A>::move_in_gradient(int chunk, int microbatch, int spare) {
  View2<A>& received = arrived_[1][chunk][microbatch % microbatches_];
  if (received.data() == nullptr) return;
  chunks_[chunk]->swap_output_grad(slot(chunk, microbatch), received);
  give_spare(spare, std::exchange(received, View2<A>()));
}

template <class T, class A>
comm::Transfer& Buffers<T, A>::add_send(const schedule::Action& action, std::size_t position,
                                        std::size_t delivered_after, int returns_to) {
  sends_.push_back({action, position, delivered_after, returns_to, {}, false, {}});
  return sends_.back().transfer;
}

// Only the schedule decides when a buffer comes back, never how fast a peer happened to be, so the number
// of buffers allocated is the same on every run.
template <class T, class A>
const schedule::Action* Buffers<T, A>::reclaim(std::size_t done, comm::Transport& transport, const ExecSpace& space,
                                               double timeout_s) {
  for (auto& s : sends_) {
    if (s.delivered || s.delivered_after > done) continue;
    if (s.transfer.active() && !transport.wait(space, s.transfer, timeout_s)) return &s.action;
    s.delivered = true;
    if (s.detached.data() != nullptr) give_spare(s.returns_to, std::exchange(s.detached, View2<A>()));
  }
  return nullptr;
}

// A slot never waits for the network, and the pool stays as small as the stash (the spares are one [N, C]
// buffer per send in flight, not a whole stash each).
template <class T, class A>
void Buffers<T, A>::retire(int chunk, int microbatch, const std::vector<schedule::Detach>& detach) {
  const int slot = this->slot(chunk, microbatch);
  auto& owner = *chunks_[chunk];
  for (const auto& d : detach)
    for (auto& s : sends_) {
      if (s.position != d.send || s.delivered || s.action.chunk != chunk) continue;
      View2<A> spare = take_spare(d.spare);
      if (s.action.op == schedule::Op::send_gradient)
        owner.swap_input_grad(slot, spare);
      else
        owner.swap_output(slot, spare);
      s.detached = std::move(spare);  // after the swap: the buffer the send reads
    }
  owner.release(slot);
  slot_[chunk][microbatch % microbatches_] = -1;
}

template <class T, class A> void Buffers<T, A>::renumber(const std::vector<std::vector<int>>& renumbering) {
  for (std::size_t c = 0; c < renumbering.size(); ++c) {
    chunks_[c]->renumber_slots(renumbering[c]);
    for (int& held : slot_[c])
      if (held >= 0) held = renumbering[c].at(std::size_t(held));
  }
}

#define KPIPE_INSTANTIATE(T, A) template class Buffers<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
