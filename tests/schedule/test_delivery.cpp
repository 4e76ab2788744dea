// Delivery points: where a send is known delivered, from the schedule alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kpipe/schedule/delivery.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {
namespace {

// 1F1B on 2 ranks, 2 micro-batches, lowered by hand (positions in comments).
//   rank 0: F0(0) sa0>1(1) F1(2) sa1>1(3) rg0<1(4) B0(5) rg1<1(6) B1(7) S(8)
//   rank 1: ra0<0(0) F0(1) B0(2) sg0>0(3) ra1<0(4) F1(5) B1(6) sg1>0(7) S(8)
TEST(Delivery, PointsOfAHandLoweredSchedule) {
  const Schedule s = parse("F0 sa0>1 F1 sa1>1 rg0<1 B0 rg1<1 B1 S\n"
                           "ra0<0 F0 B0 sg0>0 ra1<0 F1 B1 sg1>0 S\n");
  const std::size_t end = 9;
  // Rank 1 sends gradient 0 only after receiving activation 0: rank 0's receive of it (4) proves the
  // activation delivered. Activation 1 is received by rank 1 at 4, after which it sends gradient 1 (7),
  // which rank 0 receives at 6.
  EXPECT_EQ(delivery_points(s, 0, s.actions[0]), (std::vector<std::size_t>{end, 4, end, 6, end, end, end, end, end}));
  // Rank 0 sends nothing to rank 1 after receiving a gradient: rank 1's gradient sends end the step open.
  EXPECT_EQ(delivery_points(s, 1, s.actions[1]), std::vector<std::size_t>(end, end));
}

// The defining property, on every generated schedule: a point is a later receive from the same peer whose
// message the peer sends after its receive of ours, and no earlier receive in between has that property.
TEST(Delivery, EveryPointIsTheFirstReceiveThatProvesDelivery) {
  struct Case {
    std::string name;
    int p, m, v;
  };
  int proven = 0;
  for (const Case& c : {Case{"gpipe", 2, 4, 1}, Case{"1f1b", 2, 8, 1}, Case{"1f1b", 4, 8, 1},
                        Case{"interleaved", 2, 4, 2}, Case{"interleaved", 4, 8, 2}, Case{"zb-h1", 3, 6, 1}}) {
    const Schedule s = lower(generate(c.name, c.p, c.m, c.v));
    auto tag = [&](int r, const Action& a) { return message_tag(s, message_of(s, r, a)); };
    // Position in rank r's list of the action that matches `pred`; size() when none.
    auto position = [&](int r, auto pred) {
      std::size_t k = 0;
      while (k < s.actions[r].size() && !pred(s.actions[r][k])) ++k;
      return k;
    };
    for (int r = 0; r < c.p; ++r) {
      const auto& list = s.actions[r];
      const auto points = delivery_points(s, r, list);
      ASSERT_EQ(points.size(), list.size());
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (!is_send(list[i].op)) {
          EXPECT_EQ(points[i], list.size());
          continue;
        }
        const int peer = list[i].peer;
        // Where the peer receives our message.
        const std::size_t received = position(peer, [&](const Action& b) {
          return is_recv(b.op) && b.peer == r && tag(peer, b) == tag(r, list[i]);
        });
        ASSERT_LT(received, s.actions[peer].size());
        // Does our receive at j prove delivery? Its message is sent by the peer after `received`.
        auto proves = [&](std::size_t j) {
          if (!is_recv(list[j].op) || list[j].peer != peer) return false;
          const std::size_t sent = position(peer, [&](const Action& b) {
            return is_send(b.op) && b.peer == r && tag(peer, b) == tag(r, list[j]);
          });
          return sent > received;
        };
        const std::string where = c.name + " rank " + std::to_string(r) + " position " + std::to_string(i);
        for (std::size_t j = i + 1; j < std::min(points[i], list.size()); ++j) EXPECT_FALSE(proves(j)) << where;
        if (points[i] < list.size()) {
          EXPECT_TRUE(proves(points[i])) << where;
          ++proven;
        }
      }
    }
  }
  EXPECT_GT(proven, 20) << "most sends have a point inside the step";
}

}  // namespace
}  // namespace kpipe::schedule
