#include "kpipe/schedule/buffers.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/delivery.hpp"

namespace kpipe::schedule {

namespace {

// A pool that hands out its lowest free index and grows when none is free.
struct Pool {
  std::vector<bool> busy;
  int take() {
    const auto free = std::find(busy.begin(), busy.end(), false);
    const int index = int(free - busy.begin());
    if (free == busy.end()) busy.push_back(true);
    else *free = true;
    return index;
  }
  void give(int index) { busy.at(std::size_t(index)) = false; }
  void hold(int index) {
    if (index >= int(busy.size())) busy.resize(std::size_t(index) + 1, false);
    busy[std::size_t(index)] = true;
  }
  int size() const { return int(busy.size()); }
  std::vector<int> in_use() const {
    std::vector<int> used;
    for (std::size_t k = 0; k < busy.size(); ++k)
      if (busy[k]) used.push_back(int(k));
    return used;
  }
};

// The spare message buffers' places: the lowest that holds a buffer is taken (a new place, an allocation, when
// none does); a buffer given back goes to the lowest empty one.
struct Spares {
  std::vector<bool> full;
  int take() {
    const auto found = std::find(full.begin(), full.end(), true);
    if (found == full.end()) {
      full.push_back(false);
      return int(full.size()) - 1;
    }
    *found = false;
    return int(found - full.begin());
  }
  int give() {
    const auto empty = std::find(full.begin(), full.end(), false);
    if (empty == full.end()) throw std::logic_error("plan_buffers: a buffer given back to a pool with no empty place");
    *empty = true;
    return int(empty - full.begin());
  }
};

struct Send {
  std::size_t position;
  int chunk, slot;
  std::size_t delivered_after;
  bool delivered, detached;
};

// What the buffers hold at a step boundary, micro-batches numbered from the step's first: the step a long run
// repeats must leave it as it found it.
struct Boundary {
  std::vector<std::vector<int>> slots, sets;  // per chunk: in use
  // Per (chunk, micro-batch) in flight: its slot, its set and whether an activation or gradient waits for it.
  std::vector<std::tuple<int, int, int, int, bool, bool>> in_flight;
  std::size_t sends = 0;     // under way
  std::vector<bool> spares;  // per spare: whether it holds its buffer
  bool operator!=(const Boundary& b) const {
    return std::tie(slots, sets, in_flight, sends, spares) != std::tie(b.slots, b.sets, b.in_flight, b.sends, b.spares);
  }
};

// Walks the list as the runtime runs it, choosing every index and counting what the pools reach.
class Walk {
 public:
  Walk(const Schedule& s, int rank, const std::vector<Action>& list, Delivery delivery, const HeldSlots& held);
  BufferPlan run();

 private:
  void plan_posts();
  void plan_retirements();
  void post(std::size_t i);
  void act(std::size_t i);
  void reclaim(std::size_t done);
  void retire(std::size_t i);
  void give_set(int chunk, int microbatch) {
    sets_[chunk].give(set_of_[chunk][microbatch]);
    set_of_[chunk][microbatch] = -1;
  }
  Boundary boundary(int first_microbatch) const;
  void renumber_slots(std::size_t i, int first_now, const Boundary& start);
  void end_step(std::size_t i, std::size_t step, int template_step, Boundary& template_start);

  const Schedule& s_;
  int rank_;
  const std::vector<Action>& list_;
  std::size_t n_;
  int chunks_, m_;
  bool ahead_;  // receives are posted ahead
  BufferPlan plan_;
  std::vector<Pool> slots_, sets_;
  std::vector<std::vector<int>> slot_of_, set_of_;  // [chunk][micro-batch], -1 when none
  std::vector<std::vector<bool>> arrived_[2];       // [activation, gradient][chunk][micro-batch]
  std::vector<bool> posted_;
  std::vector<Send> sends_;
  Spares spares_;
};

Walk::Walk(const Schedule& s, int rank, const std::vector<Action>& list, Delivery delivery, const HeldSlots& held)
    : s_(s), rank_(rank), list_(list), n_(list.size()), chunks_(s.chunks), m_(s.microbatch_count()),
      ahead_(delivery == Delivery::buffered),
      slots_(std::size_t(s.chunks)), sets_(std::size_t(s.chunks)),
      slot_of_(std::size_t(s.chunks), std::vector<int>(std::size_t(m_), -1)), set_of_(slot_of_),
      posted_(n_, false) {
  for (auto& arrived : arrived_) arrived.assign(std::size_t(chunks_), std::vector<bool>(std::size_t(m_), false));
  for (std::size_t c = 0; c < held.size() && c < slots_.size(); ++c)
    for (const int slot : held[c]) slots_[c].hold(slot);
  plan_.retire.resize(n_);
  plan_.detach.resize(n_);
  plan_.slot.assign(n_, -1);
  plan_.backward_set.assign(n_, -1);
  plan_.spare.assign(n_, -1);
  plan_.renumber_after = n_;
}

// Where receives are posted and sends known delivered. Asynchronous lists hold several steps: what a step posts
// and waits for stays within it (a send not known delivered earlier is waited on at its step's end S), so that
// every step is run on its own.
void Walk::plan_posts() {
  plan_.post_before.resize(n_);
  plan_.delivered_after = delivery_points(s_, rank_, list_);
  std::vector<std::size_t> step_end(n_, n_);
  for (std::size_t i = n_, end = n_; i-- > 0;) {
    if (list_[i].op == Op::step) end = i;
    step_end[i] = end;
  }
  for (std::size_t i = 0; i < n_; ++i) {
    if (is_send(list_[i].op) && s_.asynchronous())
      plan_.delivered_after[i] = std::min(plan_.delivered_after[i], step_end[i]);
    if (!ahead_ || !is_compute(list_[i].op)) continue;
    std::size_t next = i + 1;
    while (next < n_ && !is_compute(list_[next].op) && list_[next].op != Op::step) ++next;
    for (std::size_t k = i + 1; k < n_ && k <= next + 2 && k < step_end[i]; ++k)
      if (is_recv(list_[k].op)) plan_.post_before[i].push_back(k);
  }
}

// The latest action touching each (chunk, micro-batch) slot: its own actions, and the forward of the next
// virtual stage on this rank, which reads the slot's output in place.
void Walk::plan_retirements() {
  std::vector<std::vector<bool>> seen(std::size_t(chunks_), std::vector<bool>(std::size_t(m_), false));
  const auto touch = [&](std::size_t i, int chunk, int microbatch) {
    if (seen[chunk][microbatch]) return;
    seen[chunk][microbatch] = true;
    plan_.retire[i].push_back(chunk);
  };
  for (std::size_t i = n_; i-- > 0;) {
    const Action& a = list_[i];
    if (!(is_compute(a.op) || is_comm(a.op))) continue;
    touch(i, a.chunk, a.microbatch);
    const int vstage = s_.virtual_stage(rank_, a.chunk);
    if (a.op == Op::forward && vstage > 0 && s_.rank_of(vstage - 1) == rank_)
      touch(i, s_.chunk_of(vstage - 1), a.microbatch);
  }
}

// The receives posted ahead before position i, then a receive at i not posted ahead: each takes its spare.
void Walk::post(std::size_t i) {
  const auto post_one = [&](std::size_t k) {
    if (posted_[k]) return;
    posted_[k] = true;
    plan_.spare[k] = spares_.take();
    arrived_[list_[k].op == Op::recv_gradient][list_[k].chunk][list_[k].microbatch] = true;
  };
  for (const std::size_t k : plan_.post_before[i]) post_one(k);
  if (is_recv(list_[i].op)) post_one(i);
}

void Walk::act(std::size_t i) {
  const Action& a = list_[i];
  const int c = a.chunk, mb = a.microbatch;
  // A received buffer swapped into the slot: the slot's former buffer becomes a spare.
  const auto move_in = [&](bool gradient) {
    if (!arrived_[gradient][c][mb]) return;
    arrived_[gradient][c][mb] = false;
    plan_.spare[i] = spares_.give();
  };
  switch (a.op) {
    case Op::send_activation:
    case Op::send_gradient: sends_.push_back({i, c, slot_of_[c][mb], plan_.delivered_after[i], false, false}); break;
    case Op::forward:
      if (slot_of_[c][mb] < 0) slot_of_[c][mb] = slots_[c].take();
      plan_.slot[i] = slot_of_[c][mb];
      move_in(false);
      break;
    case Op::backward:
    case Op::backward_input:
      move_in(true);
      plan_.backward_set[i] = set_of_[c][mb] = sets_[c].take();
      if (a.op == Op::backward) give_set(c, mb);
      break;
    case Op::backward_weight: give_set(c, mb); break;
    default: break;
  }
}

// The sends delivered by position `done`: a detached buffer becomes a spare.
void Walk::reclaim(std::size_t done) {
  for (auto& send : sends_) {
    if (send.delivered || send.delivered_after > done) continue;
    send.delivered = true;
    if (send.detached) plan_.spare[send.position] = spares_.give();
  }
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(), [](const Send& send) { return send.delivered; }),
               sends_.end());
}

void Walk::retire(std::size_t i) {
  const int mb = list_[i].microbatch;
  for (const int done : plan_.retire[i]) {
    for (auto& send : sends_)
      if (send.chunk == done && send.slot == slot_of_[done][mb] && !send.detached) {
        send.detached = true;  // the send keeps the slot's buffer, a spare takes its place
        plan_.detach[i].push_back({send.position, spares_.take()});
      }
    slots_[done].give(slot_of_[done][mb]);
    slot_of_[done][mb] = -1;
  }
}

Boundary Walk::boundary(int first) const {
  Boundary b;
  for (int c = 0; c < chunks_; ++c) {
    b.slots.push_back(slots_[c].in_use());
    b.sets.push_back(sets_[c].in_use());
    for (int mb = 0; mb < m_; ++mb)
      if (slot_of_[c][mb] >= 0 || set_of_[c][mb] >= 0 || arrived_[0][c][mb] || arrived_[1][c][mb])
        b.in_flight.emplace_back(c, mb - first, slot_of_[c][mb], set_of_[c][mb], arrived_[0][c][mb],
                                 arrived_[1][c][mb]);
  }
  b.sends = sends_.size();
  b.spares = spares_.full;
  return b;
}

// The step a long run repeats ends by renumbering each chunk's slots (after its S, position i): the slot a
// micro-batch in flight holds becomes the one its predecessor by a step held when the step began (`start`;
// micro-batches from `first_now` on are the next step's), the others keep their order, so that every repetition finds the slots as the first did.
void Walk::renumber_slots(std::size_t i, int first_now, const Boundary& start) {
  plan_.renumber_after = i;
  plan_.renumbering.assign(std::size_t(chunks_), {});
  for (int c = 0; c < chunks_; ++c) {
    const int size = slots_[c].size();
    std::vector<int> to(std::size_t(size), -1);
    std::vector<bool> target_taken(std::size_t(size), false);
    for (const auto& [chunk, microbatch, slot, set, activation, gradient] : start.in_flight) {
      const int now = microbatch + first_now;
      if (chunk != c || slot < 0) continue;
      if (now >= m_ || slot_of_[c][now] < 0)
        throw std::logic_error(fmt::format("plan_buffers: rank {}'s repeated step holds other micro-batches at its end "
                                           "than at its start", rank_));
      to[std::size_t(slot_of_[c][now])] = slot;
      target_taken[std::size_t(slot)] = true;
    }
    for (int from = 0, target = 0; from < size; ++from) {
      if (to[std::size_t(from)] >= 0) continue;
      while (target_taken[std::size_t(target)]) ++target;
      to[std::size_t(from)] = target++;
    }
    Pool renumbered;
    renumbered.busy.assign(std::size_t(size), false);
    for (int k = 0; k < size; ++k) renumbered.busy[std::size_t(to[std::size_t(k)])] = slots_[c].busy[std::size_t(k)];
    slots_[c] = renumbered;
    for (int& slot : slot_of_[c])
      if (slot >= 0) slot = to[std::size_t(slot)];
    plan_.renumbering[std::size_t(c)] = std::move(to);
  }
}

// At the end of step `step` (its S at position i): the slots it leaves held; the step a long run repeats
// renumbers them, and must then leave every buffer as it found them.
void Walk::end_step(std::size_t i, std::size_t step, int template_step, Boundary& template_start) {
  const int next = int(step) + 1;
  if (int(step) == template_step) renumber_slots(i, next * s_.microbatches, template_start);
  HeldSlots held;
  for (const auto& pool : slots_) held.push_back(pool.in_use());
  plan_.held_after_step.push_back(held);
  if (next == template_step) template_start = boundary(next * s_.microbatches);
  if (int(step) == template_step && boundary(next * s_.microbatches) != template_start)
    throw std::logic_error(fmt::format("plan_buffers: rank {}'s buffers after step {} differ from those before it, "
                                       "which a long run repeats", rank_, template_step));
}

BufferPlan Walk::run() {
  plan_posts();
  plan_retirements();
  // The step a long asynchronous run repeats: lists shorter than the horizon run as they are (step_source).
  const Horizon horizon{s_.ranks, s_.microbatches};
  const int template_step = s_.asynchronous() && s_.steps >= horizon.steps() ? horizon.template_step() : -1;
  Boundary template_start;
  std::size_t step = 0;
  for (std::size_t i = 0; i < n_; ++i) {
    post(i);
    act(i);
    reclaim(i);
    retire(i);
    if (list_[i].op == Op::step) end_step(i, step++, template_step, template_start);
  }
  reclaim(n_);  // the list's end delivers every send
  if (plan_.held_after_step.empty() || list_.back().op != Op::step) end_step(n_, step, -1, template_start);
  for (int c = 0; c < chunks_; ++c) {
    plan_.slots.push_back(slots_[c].size());
    plan_.backward_sets.push_back(sets_[c].size());
  }
  plan_.message_buffers = int(spares_.full.size());
  return std::move(plan_);
}

}  // namespace

BufferPlan plan_buffers(const Schedule& s, int rank, const std::vector<Action>& list, Delivery delivery,
                        const HeldSlots& held) {
  return Walk(s, rank, list, delivery, held).run();
}

}  // namespace kpipe::schedule
