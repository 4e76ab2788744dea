// The ordered data-parallel reduction as a pass: every replica keeps its schedule (order and activation
// bound), the running sum visits the groups in global order, the validator catches a broken chain, and
// the simulator prices the waits and the messages.
#include <gtest/gtest.h>

#include <set>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

#include "support/input_error.hpp"

namespace kpipe::schedule {
namespace {

// A replica's list without the reduction's actions, with every B split: what it computes, in order.
std::vector<Action> computation(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list) {
    if (a.op == Op::backward) {
      out.push_back(Action{Op::backward_input, a.microbatch, a.chunk, -1});
      out.push_back(Action{Op::backward_weight, a.microbatch, a.chunk, -1});
    } else if (is_compute(a.op) || a.op == Op::step) {
      out.push_back(a);
    }
  }
  return out;
}

struct Layout {
  std::string name;
  int p, v;
};
const Layout cases[] = {{"gpipe", 1, 1}, {"gpipe", 3, 1}, {"1f1b", 2, 1},        {"1f1b", 4, 1},
                      {"zb-h1", 3, 1}, {"interleaved", 2, 2}, {"zb-v", 2, 2}, {"zb-v", 3, 2}};

TEST(Reduction, EveryReplicaKeepsItsScheduleAndItsActivationBound) {
  for (const Layout& c : cases)
    for (int m : {1, 2, 4, 6})
      for (int d : {2, 3, 4})
        for (int group = 1; group <= m; ++group) {
          if (m % group != 0 || (c.name == "interleaved" && m % c.p != 0)) continue;
          // Several chunks per rank: the chunks' sums can wait on each other when groups are longer than one
          // micro-batch (TheValidatorCatchesABrokenChain); groups of one never do.
          if (c.v > 1 && group > 1) continue;
          SCOPED_TRACE(fmt::format("{} p={} m={} d={} group={}", c.name, c.p, m, d, group));
          const Schedule base = generate(c.name, c.p, m, c.v);
          const Replicated r = order_reduction(lower(base), d, group);
          ASSERT_NO_THROW(validate(r));
          EXPECT_TRUE(r.ordered);
          EXPECT_EQ(r.groups(), d * m / group);
          std::set<int> global;
          for (int replica = 0; replica < d; ++replica) {
            const Schedule& s = r.replicas[replica];
            EXPECT_EQ(peak_stash(s), peak_stash(base));  // the schedule's bound on every replica
            for (int rank = 0; rank < c.p; ++rank)
              EXPECT_EQ(computation(s.actions[rank]), computation(base.actions[rank]));
            for (int j = 0; j < m; ++j) global.insert(r.global_microbatch(replica, j));
          }
          EXPECT_EQ(int(global.size()), d * m);  // every micro-batch of the mini-batch exactly once
          EXPECT_EQ(*global.rbegin(), d * m - 1);
        }
}

// Groups go round robin: replica r holds groups r, r + d, ...; the sum crosses d*m/g - 1 times per chunk.
TEST(Reduction, TheRunningSumVisitsTheGroupsInOrder) {
  const Replicated r = order_reduction(one_f_one_b(2, 4), 2, 2);
  EXPECT_EQ(r.global_microbatch(0, 0), 0);
  EXPECT_EQ(r.global_microbatch(0, 1), 1);
  EXPECT_EQ(r.global_microbatch(1, 0), 2);
  EXPECT_EQ(r.global_microbatch(1, 1), 3);
  EXPECT_EQ(r.global_microbatch(0, 2), 4);
  EXPECT_EQ(r.global_microbatch(1, 3), 7);
  // Rank 1 (last stage, F0 B0 F1 B1 ...): replica 1 opens each of its groups with I, rs, W and closes it with ss.
  EXPECT_EQ(to_text(r.replicas[1]).substr(to_text(r.replicas[1]).find('\n') + 1),
            "F0 I0 rs1<0 W0 F1 B1 ss2>0 F2 I2 rs3<0 W2 F3 B3 S\n");
  EXPECT_EQ(to_text(r.replicas[0]).substr(to_text(r.replicas[0]).find('\n') + 1),
            "F0 B0 F1 B1 ss1>1 F2 I2 rs2<1 W2 F3 B3 ss3>1 S\n");
  int sums = 0;
  for (const auto& replica : r.replicas)
    for (const auto& list : replica.actions)
      for (const Action& a : list) sums += a.op == Op::send_sum;
  EXPECT_EQ(sums, 2 * (r.groups() - 1));  // two ranks of one chunk each
  // Allreduce: contiguous micro-batches, no running sum.
  const Replicated all = allreduce_replicas(one_f_one_b(2, 4), 2);
  EXPECT_FALSE(all.ordered);
  EXPECT_EQ(all.global_microbatch(1, 0), 4);
  EXPECT_NO_THROW(validate(all));
}

TEST(Reduction, TheValidatorCatchesABrokenChain) {
  const Replicated good = order_reduction(one_f_one_b(1, 2), 2, 1);  // replica 1: F0 I0 rs1<0 W0 ss2>0 F1 I1 rs3<0 W1 S
  {
    Replicated r = good;
    auto& list = r.replicas[1].actions[0];
    std::swap(list[2], list[3]);  // W0 before its sum arrives
    EXPECT_NE(test::input_error_of([&] { validate(r); }).find("weight gradient of group 1 before its gradient sum arrives"),
              std::string::npos)
        << test::input_error_of([&] { validate(r); });
  }
  {
    Replicated r = good;
    r.replicas[1].actions[0][2].peer = 1;  // from itself
    EXPECT_NE(test::input_error_of([&] { validate(r); }).find("group 1's sum comes from replica 0"), std::string::npos);
  }
  {
    Replicated r = good;
    auto& list = r.replicas[0].actions[0];
    list.erase(std::find_if(list.begin(), list.end(), [](const Action& a) { return a.op == Op::send_sum; }));
    EXPECT_NE(test::input_error_of([&] { validate(r); }).find("receives a sum while it holds group 0's"), std::string::npos)
        << test::input_error_of([&] { validate(r); });
  }
  {
    // Two chunks per rank and groups of three: chunk 1's sum waits on replica 1, which waits for chunk 0's,
    // which replica 0 sends only later. Every replica's own order is right; the dry run finds the cycle.
    const std::string error = test::input_error_of([] { validate(order_reduction(lower(interleaved(2, 6, 2)), 2, 3)); });
    EXPECT_NE(error.find("schedule deadlock: replica 0"), std::string::npos) << error;
    EXPECT_NE(error.find("waits for the gradient sum for group"), std::string::npos) << error;
  }
}

// Costs: with free messages a replica trails the one before it by one group's W's; the messages add their
// transfer time on every hop; fewer, larger groups trade hops (traffic) for longer waits.
TEST(Reduction, TheSimulatorPricesWaitsAndHops) {
  const Schedule base = one_f_one_b(2, 8);
  Costs c;
  c.f = 1;
  c.b = 2;
  c.i = c.w = 1;
  // The replicas' lists as a run plans them: the ordered reduction in groups of `group` micro-batches.
  const auto replicated = [&](int group) {
    return plan(base, "1f1b", Replication{2, DpReduction::ordered, group}, Delivery::buffered);
  };
  const double alone = simulate(base, c).makespan;
  const SimResult fine = simulate(replicated(1), std::vector<Costs>(2, c));
  EXPECT_LE(fine.makespan, alone + c.w);  // replica 1 starts its W's at most one W late, then keeps up
  const SimResult coarse = simulate(replicated(8), std::vector<Costs>(2, c));
  EXPECT_GT(coarse.makespan, fine.makespan + 4);  // replica 1 waits for all of replica 0's W's
  Costs priced = c;
  priced.per_byte = 1e-3;
  priced.gradient_bytes = 500;  // 0.5 per hop
  const SimResult slower = simulate(replicated(1), std::vector<Costs>(2, priced));
  EXPECT_GT(slower.makespan, fine.makespan);
  EXPECT_EQ(fine.peak_stash, (std::vector<int>{2, 1, 2, 1}));  // 1F1B's bound on both replicas
}

}  // namespace
}  // namespace kpipe::schedule
