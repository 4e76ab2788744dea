#include "kpipe/schedule/lower.hpp"

namespace kpipe::schedule {

Schedule lower(const Schedule& s) {
  if (is_lowered(s)) return s;
  Schedule out = s;
  const int last = s.virtual_stages() - 1;
  for (int r = 0; r < int(s.actions.size()); ++r) {
    auto& list = out.actions[r];
    list.clear();
    for (const auto& a : s.actions[r]) {
      const int k = s.virtual_stage(r, a.chunk);
      const int prev_rank = k > 0 ? s.rank_of(k - 1) : r, next_rank = k < last ? s.rank_of(k + 1) : r;
      if (a.op == Op::forward) {
        if (prev_rank != r) list.push_back(Action{Op::recv_activation, a.microbatch, a.chunk, prev_rank});
        list.push_back(a);
        if (next_rank != r) list.push_back(Action{Op::send_activation, a.microbatch, a.chunk, next_rank});
      } else if (is_backward(a.op)) {
        if (next_rank != r) list.push_back(Action{Op::recv_gradient, a.microbatch, a.chunk, next_rank});
        list.push_back(a);
        if (prev_rank != r) list.push_back(Action{Op::send_gradient, a.microbatch, a.chunk, prev_rank});
      } else {
        list.push_back(a);
      }
    }
  }
  return out;
}

Schedule strip_messages(const Schedule& s) {
  Schedule out = s;
  for (auto& list : out.actions) {
    std::vector<Action> kept;
    kept.reserve(list.size());
    for (const auto& a : list)
      if (!is_comm(a.op)) kept.push_back(a);
    list = std::move(kept);
  }
  return out;
}

}  // namespace kpipe::schedule
