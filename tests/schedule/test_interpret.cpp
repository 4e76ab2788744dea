// The one schedule interpreter: what blocks in each mode (buffered, rendezvous, timed), and the one deadlock
// report naming every blocked process with its replica, rank, position, action and what it waits for.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/interpret.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {
namespace {

// Rank 0 forwards three micro-batches before its first backward; rank 1 splits its backwards and computes W0
// between sending g0 and receiving a1. Buffered sends run it; in stream order rank 0's send of a1 waits for a
// receive that rank 1 reaches only after its send of g0, which waits for rank 0's receive of g0.
const char* const crossing =
    "F0 sa0>1 F1 sa1>1 F2 sa2>1 rg0<1 B0 rg1<1 B1 rg2<1 B2 S\n"
    "ra0<0 F0 I0 sg0>0 W0 ra1<0 F1 I1 sg1>0 W1 ra2<0 F2 I2 sg2>0 W2 S\n";

TEST(Interpret, BufferedSendsRunWhatRendezvousDeadlocksOn) {
  const Schedule s = parse(crossing);
  const Interpretation buffered = interpret(s, Mode::buffered());
  EXPECT_TRUE(buffered.finished()) << buffered.failure();
  EXPECT_EQ(buffered.stopped_at, (std::vector<std::size_t>{s.actions[0].size(), s.actions[1].size()}));

  const Interpretation stream = interpret(s, Mode::rendezvous(SumRoute::none));
  ASSERT_FALSE(stream.finished());
  ASSERT_EQ(stream.blocked.size(), 2u);
  EXPECT_EQ(stream.blocked[0].process, 0);
  EXPECT_EQ(stream.blocked[0].position, 3u);
  // Rank 0's held group is sa1>1 alone; rank 1's is sg0>0: each names the partner it has not met.
  ASSERT_EQ(stream.blocked[0].unmet.size(), 1u);
  EXPECT_EQ(stream.blocked[0].unmet[0].peer, 1);
  EXPECT_EQ(stream.blocked[0].unmet[0].peer_position, 5u);
  EXPECT_EQ(stream.failure(),
            "schedule deadlock in stream order (NCCL: messages in list order, a send waits for its receive): rank 0 "
            "position 3 (sa1>1) waits for rank 1 to reach position 5 (ra1<0), but it is held at position 3 (sg0>0); "
            "rank 1 position 3 (sg0>0) waits for rank 0 to reach position 6 (rg0<1), but it is held at position 3 "
            "(sa1>1)");
}

// The buffered report has the same form: every blocked rank, its position, action and what it waits for.
// Rank 0 waits for its gradient before it forwards, so nothing moves on any rank.
TEST(Interpret, OneReportFormatForEveryMode) {
  const Schedule s = parse(
      "rg0<1 F0 sa0>1 B0 S\n"
      "ra0<0 F0 sa0>2 rg0<2 B0 sg0>0 S\n"
      "ra0<1 F0 B0 sg0>1 S\n");
  EXPECT_EQ(interpret(s, Mode::buffered()).failure(),
            "schedule deadlock: rank 0 position 0 (rg0<1) waits for the gradient of micro-batch 0 from rank 1; rank 1 "
            "position 0 (ra0<0) waits for the activation of micro-batch 0 from rank 0; rank 2 position 0 (ra0<1) "
            "waits for the activation of micro-batch 0 from rank 1");
  EXPECT_EQ(interpret(s, Mode::rendezvous(SumRoute::none)).failure(),
            "schedule deadlock in stream order (NCCL: messages in list order, a send waits for its receive): rank 0 "
            "position 0 (rg0<1) waits for rank 1 to reach position 5 (sg0>0), but it is held at position 0 (ra0<0); "
            "rank 1 position 0 (ra0<0) waits for rank 0 to reach position 2 (sa0>1), but it is held at position 0 "
            "(rg0<1); rank 2 position 0 (ra0<1) waits for rank 1 to reach position 2 (sa0>2), but it is held at "
            "position 0 (ra0<0)");
}

// Replicas: processes are named by replica and rank, sums by the group they carry.
TEST(Interpret, ReplicasAreNamedByReplicaAndRank) {
  Replicated r;
  r.ordered = true;
  r.replicas = {parse("F0 B0 rs2<1 ss1>1 F1 B1 S\n"), parse("F0 B0 rs1<0 ss2>0 F1 B1 S\n")};
  const Interpretation run = interpret(r, Mode::buffered());
  EXPECT_EQ(run.failure(),
            "schedule deadlock: replica 0 rank 0 position 2 (rs2<1) waits for the gradient sum for group 2 from "
            "replica 1; replica 1 rank 0 position 2 (rs1<0) waits for the gradient sum for group 1 from replica 0");
}

// Timed: each computation takes its cost and each message latency after its send. Rank 1's I0 ends at 3, its
// gradient reaches rank 0 at 3.5; a1, sent at 2, waits for rank 1 to finish W0 at 4.
TEST(Interpret, TimedRunsPriceComputationsAndMessages) {
  const Schedule s = parse(
      "F0 sa0>1 F1 sa1>1 rg0<1 B0 rg1<1 B1 S\n"
      "ra0<0 F0 I0 sg0>0 W0 ra1<0 F1 I1 sg1>0 W1 S\n");
  std::vector<Costs> costs(2);  // f = i = w = 1, b = 2
  for (auto& c : costs) c.latency = 0.5;
  const Interpretation run = interpret(s, Mode::timed(costs));
  ASSERT_TRUE(run.finished());
  auto span_of = [&](int rank, Op op, int microbatch) {
    for (const Span& span : run.timeline[rank])
      if (span.action.op == op && span.action.microbatch == microbatch) return std::make_pair(span.start, span.end);
    return std::make_pair(-1.0, -1.0);
  };
  EXPECT_EQ(span_of(1, Op::forward, 0), std::make_pair(1.5, 2.5));
  EXPECT_EQ(span_of(0, Op::backward, 0), std::make_pair(4.0, 6.0));   // g0 arrives at 3.5 + 0.5
  EXPECT_EQ(span_of(1, Op::forward, 1), std::make_pair(4.5, 5.5));    // after W0
  EXPECT_EQ(span_of(0, Op::backward, 1), std::make_pair(7.0, 9.0));   // g1 sent at 6.5
  EXPECT_EQ(run.free_at, (std::vector<double>{9.0, 7.5}));
  EXPECT_EQ(run.busy, (std::vector<double>{6.0, 6.0}));
  EXPECT_THROW(interpret(s, [&] {
                 Mode stream = Mode::rendezvous(SumRoute::none);
                 stream.costs = costs;
                 return stream;
               }()),
               std::logic_error);  // priced buffered only (interpret.hpp)
}

// Asynchronous lists in stream order: a step boundary S is a barrier of every rank. PipeDream's rank 0 sends
// in step 0 the activation of micro-batch 2 (step 1's), which rank 1 receives only after its S: the send
// holds rank 0 before the barrier, where rank 1 waits for it.
TEST(Interpret, StepBoundariesAreBarriersInStreamOrder) {
  const Schedule s = lower(asynchronous(Updates::pipedream, 2, 2, {3, false}));
  EXPECT_TRUE(interpret(s, Mode::buffered()).finished());
  const Interpretation stream = interpret(s, Mode::rendezvous(SumRoute::none));
  EXPECT_EQ(stream.failure(),
            "schedule deadlock in stream order (NCCL: messages in list order, a send waits for its receive): rank 0 "
            "position 8 (sa2>1) waits for rank 1 to reach position 11 (ra2<0), but it is held at position 10 (S); "
            "rank 1 position 10 (S) waits for rank 0 to reach step boundary 0, but it is held at position 8 (sa2>1)")
      << to_text(s);
}

// Pairing in posting order is part of the rendezvous mode: messages that cannot be paired stop the run before
// it starts, with the receive that is out of order.
TEST(Interpret, RendezvousPairsInPostingOrder) {
  const Schedule s = parse(
      "F0 sa0>1 F1 sa1>1 rg0<1 B0 rg1<1 B1 S\n"
      "ra1<0 ra0<0 F0 B0 sg0>0 F1 B1 sg1>0 S\n");
  EXPECT_TRUE(interpret(s, Mode::buffered()).finished());
  const Interpretation stream = interpret(s, Mode::rendezvous(SumRoute::none));
  EXPECT_NE(stream.unmatched.find("schedule rank 1 position 0 (ra1<0): NCCL matches messages"), std::string::npos)
      << stream.unmatched;
  EXPECT_TRUE(stream.blocked.empty());
}

}  // namespace
}  // namespace kpipe::schedule
