#include "kpipe/schedule/buffers.hpp"

#include <algorithm>

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
  void give(int index) { busy[index] = false; }
  int size() const { return int(busy.size()); }
};

}  // namespace

BufferPlan plan_buffers(const Schedule& s, int rank, const std::vector<Action>& list) {
  const std::size_t n = list.size();
  const int chunks = s.chunks, m = s.microbatch_count();
  BufferPlan plan;
  plan.post_before.resize(n);
  plan.retire.resize(n);
  plan.delivered_after = delivery_points(s, rank, list);
  // Asynchronous lists hold several steps: what a step posts and waits for stays within it (a send not
  // known delivered earlier is waited on at its step's end S), so that every step is run on its own.
  std::vector<std::size_t> step_end(n, n);
  for (std::size_t i = n, end = n; i-- > 0;) {
    if (list[i].op == Op::step) end = i;
    step_end[i] = end;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (is_send(list[i].op) && s.asynchronous()) plan.delivered_after[i] = std::min(plan.delivered_after[i], step_end[i]);
    if (is_recv(list[i].op)) plan.post_before[i].push_back(i);  // a receive not posted ahead is posted here
    if (!is_compute(list[i].op)) continue;
    std::size_t next = i + 1;
    while (next < n && !is_compute(list[next].op) && list[next].op != Op::step) ++next;
    for (std::size_t k = i + 1; k < n && k <= next + 2 && k < step_end[i]; ++k)
      if (is_recv(list[k].op)) plan.post_before[i].push_back(k);
  }
  {
    // The latest action touching each (chunk, micro-batch) slot: its own actions, and the forward of the next
    // virtual stage on this rank, which reads the slot's output in place.
    std::vector<std::vector<bool>> seen(chunks, std::vector<bool>(m, false));
    const auto touch = [&](std::size_t i, int chunk, int microbatch) {
      if (seen[chunk][microbatch]) return;
      seen[chunk][microbatch] = true;
      plan.retire[i].push_back(chunk);
    };
    for (std::size_t i = n; i-- > 0;) {
      const Action& a = list[i];
      if (!(is_compute(a.op) || is_comm(a.op))) continue;
      touch(i, a.chunk, a.microbatch);
      const int vstage = s.virtual_stage(rank, a.chunk);
      if (a.op == Op::forward && vstage > 0 && s.rank_of(vstage - 1) == rank)
        touch(i, s.chunk_of(vstage - 1), a.microbatch);
    }
  }

  // Walk the list as the runtime does, counting what the pools reach.
  std::vector<Pool> slots(chunks), sets(chunks);
  std::vector<std::vector<int>> slot(chunks, std::vector<int>(m, -1)), set(chunks, std::vector<int>(m, -1));
  std::vector<std::vector<bool>> arrived[2] = {std::vector<std::vector<bool>>(chunks, std::vector<bool>(m)),
                                               std::vector<std::vector<bool>>(chunks, std::vector<bool>(m))};
  std::vector<bool> posted(n, false);
  struct Send {
    int chunk, slot;
    std::size_t delivered_after;
    bool active, detached;
  };
  std::vector<Send> sends;
  int spares = 0;
  auto take_spare = [&] {
    if (spares == 0) ++plan.message_buffers;
    else --spares;
  };
  auto reclaim = [&](std::size_t done) {
    for (auto& send : sends) {
      if (send.active && send.delivered_after <= done) send.active = false;
      if (!send.active && send.detached) {
        send.detached = false;
        ++spares;
      }
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    const Action& a = list[i];
    for (std::size_t k : plan.post_before[i]) {
      if (posted[k]) continue;
      posted[k] = true;
      take_spare();
      arrived[list[k].op == Op::recv_gradient][list[k].chunk][list[k].microbatch] = true;
    }
    const int c = a.chunk, mb = a.microbatch;
    switch (a.op) {
      case Op::send_activation:
      case Op::send_gradient: sends.push_back({c, slot[c][mb], plan.delivered_after[i], true, false}); break;
      case Op::forward:
        if (slot[c][mb] < 0) slot[c][mb] = slots[c].take();
        if (arrived[0][c][mb]) arrived[0][c][mb] = false, ++spares;  // the slot's own buffer becomes a spare
        break;
      case Op::backward:
      case Op::backward_input:
        if (arrived[1][c][mb]) arrived[1][c][mb] = false, ++spares;
        set[c][mb] = sets[c].take();
        if (a.op == Op::backward) sets[c].give(set[c][mb]);
        break;
      case Op::backward_weight: sets[c].give(set[c][mb]); break;
      default: break;
    }
    reclaim(i);
    for (const int done : plan.retire[i]) {
      for (auto& send : sends)
        if (send.chunk == done && send.slot == slot[done][mb] && send.active && !send.detached) {
          take_spare();  // takes the slot's buffer's place; the send keeps the buffer
          send.detached = true;
        }
      slots[done].give(slot[done][mb]);
      slot[done][mb] = -1;
    }
  }
  for (int c = 0; c < chunks; ++c) {
    plan.slots.push_back(slots[c].size());
    plan.backward_sets.push_back(sets[c].size());
  }
  return plan;
}

}  // namespace kpipe::schedule
