#include "kpipe/schedule/delivery.hpp"

namespace kpipe::schedule {

std::vector<std::size_t> delivery_points(const Schedule& s, int rank, const std::vector<Action>& list) {
  // A message is told apart by what it carries (tags repeat in asynchronous schedules' long lists).
  auto tag = [&](int r, const Action& a) {
    const Message m = message_of(s, r, a);
    return (std::int64_t(m.microbatch) * s.virtual_stages() + m.dst_vstage) * 2 + (m.gradient ? 1 : 0);
  };
  std::vector<std::size_t> points(list.size(), list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!is_send(list[i].op)) continue;
    const int peer = list[i].peer;
    const std::int64_t sent = tag(rank, list[i]);
    const auto& theirs = s.actions[peer];
    auto receives_ours = [&](const Action& b) { return is_recv(b.op) && b.peer == rank && tag(peer, b) == sent; };
    auto sends_to_us = [&](const Action& b) { return is_send(b.op) && b.peer == rank; };
    std::size_t k = 0;
    while (k < theirs.size() && !receives_ours(theirs[k])) ++k;  // the peer's receive of this message,
    while (k < theirs.size() && !sends_to_us(theirs[k])) ++k;     // then its next send to us
    if (k == theirs.size()) continue;
    const std::int64_t answer = tag(peer, theirs[k]);
    for (std::size_t j = i + 1; j < list.size(); ++j)
      if (is_recv(list[j].op) && list[j].peer == peer && tag(rank, list[j]) == answer) {
        points[i] = j;
        break;
      }
  }
  return points;
}

}  // namespace kpipe::schedule
