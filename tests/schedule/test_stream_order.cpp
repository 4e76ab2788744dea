// The ordering proof a stream-ordered transport (NCCL) relies on: per pair of ranks and direction, sends and
// receives match in posting order, and the groups of consecutive messages cannot deadlock when sends wait for
// their receives. Every generated schedule passes; hand-written ones that MPI would run but NCCL could not are
// rejected with rank, position and action.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/stream_order.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {
namespace {

std::string stream_error_of(const Schedule& s) {
  try {
    validate_stream_order(s);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(valid)";
}

std::string stream_error_of(const Replicated& r) {
  try {
    validate_stream_order(r);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(valid)";
}

// What the trainer runs over NCCL: the generated schedule, lowered, through order_for_streams(); it must pass
// both validators. 1F1B and ZB-H1 need no move; GPipe with chunks and interleaved schedules pass activations
// both ways between two ranks and do.
TEST(StreamOrder, EveryGeneratedScheduleIsSafeUnderNcclAfterThePass) {
  int checked = 0, changed = 0;
  for (const ScheduleKind kind : synchronous_schedules()) {
    const std::string name{to_string(kind)};
    for (int ranks = 1; ranks <= 6; ++ranks)
      for (int chunks = 1; chunks <= (name == "interleaved" || name == "gpipe" || name == "naive" ? 3 : 2); ++chunks)
        for (int m = 1; m <= 12; ++m) {
          if ((name == "zb-v") != (chunks == 2) && name != "interleaved" && name != "gpipe" && name != "naive") continue;
          if (name == "interleaved" && chunks > 1 && m % ranks != 0) continue;
          for (bool split : {false, true}) {
            Schedule s = generate(name, ranks, m, chunks);
            if (split) s = split_backward(s);
            const Schedule lowered = lower(s);
            const Schedule ordered = order_for_streams(lowered);
            const std::string what = name + (split ? " split" : "") + " p=" + std::to_string(ranks) +
                                     " v=" + std::to_string(chunks) + " m=" + std::to_string(m);
            EXPECT_NO_THROW(validate(ordered)) << what;
            EXPECT_EQ(stream_error_of(ordered), "(valid)") << what;
            if (name == "1f1b" || name == "zb-h1") {
              EXPECT_EQ(ordered, lowered) << what << ": nothing to move";
            }
            changed += ordered != lowered;
            ++checked;
          }
        }
  }
  EXPECT_GT(checked, 600);
  EXPECT_GT(changed, 0);
}

TEST(StreamOrder, GPipeWithChunksDeadlocksWithoutThePass) {
  // p = 2, v = 2: rank 1 sends chunk 0's output back to rank 0 while rank 0 still sends it activations.
  const Schedule s = lower(gpipe(2, 4, 2));
  ASSERT_NO_THROW(validate(s));
  EXPECT_NE(stream_error_of(s).find("schedule deadlock in stream order"), std::string::npos) << stream_error_of(s);
  EXPECT_EQ(stream_error_of(order_for_streams(s)), "(valid)");
}

// Rank 1 receives micro-batch 1's activation before micro-batch 0's. MPI matches by tag and runs it; NCCL
// would hand micro-batch 0's data to the receive of micro-batch 1.
TEST(StreamOrder, ReceivesOutOfSendOrderAreRejected) {
  const Schedule s = parse(
      "F0 sa0>1 F1 sa1>1 rg0<1 B0 rg1<1 B1 S\n"
      "ra1<0 ra0<0 F0 B0 sg0>0 F1 B1 sg1>0 S\n");
  ASSERT_NO_THROW(validate(s));
  EXPECT_EQ(stream_error_of(s),
            "schedule rank 1 position 0 (ra1<0): NCCL matches messages between two ranks in posting order (it has no "
            "tags): this is receive 0 from rank 0, but rank 0's send 0 to rank 1 is sa0>1 (position 1); order the "
            "receives as the sends");
}

// Rank 0 runs GPipe-like (all forwards first), rank 1 splits its backwards and computes W0 between sending
// g0 and receiving a1. With buffered sends (MPI) that is fine; under NCCL rank 0's send of a1 waits for rank
// 1's receive of it, which comes after rank 1's send of g0, which waits for rank 0's receive of g0, which comes
// after rank 0's send of a1.
TEST(StreamOrder, ADeadlockOnlyBlockingSendsHaveIsRejected) {
  const Schedule s = parse(
      "F0 sa0>1 F1 sa1>1 F2 sa2>1 rg0<1 B0 rg1<1 B1 rg2<1 B2 S\n"
      "ra0<0 F0 I0 sg0>0 W0 ra1<0 F1 I1 sg1>0 W1 ra2<0 F2 I2 sg2>0 W2 S\n");
  ASSERT_NO_THROW(validate(s));
  const std::string error = stream_error_of(s);
  EXPECT_EQ(error,
            "schedule deadlock in stream order (NCCL: messages in list order, a send waits for its receive): rank 0 "
            "position 3 (sa1>1) waits for rank 1 to reach position 5 (ra1<0), but it is held at position 3 (sg0>0); "
            "rank 1 position 3 (sg0>0) waits for rank 0 to reach position 6 (rg0<1), but it is held at position 3 "
            "(sa1>1)");
  // The pass moves rank 1's receive of a1 into the group of its send of g0, where rank 0's send meets it.
  const Schedule ordered = order_for_streams(s);
  EXPECT_EQ(to_text(ordered),
            "F0 sa0>1 F1 sa1>1 F2 sa2>1 rg0<1 B0 rg1<1 B1 rg2<1 B2 S\n"
            "ra0<0 F0 I0 sg0>0 ra1<0 W0 F1 I1 sg1>0 ra2<0 W1 F2 I2 sg2>0 W2 S\n");
  EXPECT_NO_THROW(validate(ordered));
  EXPECT_EQ(stream_error_of(ordered), "(valid)");
}

// The same two ranks with the messages that meet inside one group: rank 0's send of a1 and receive of g0 are
// consecutive, so NCCL runs them together, and rank 1 does likewise.
TEST(StreamOrder, GroupedExchangesAreSafe) {
  const Schedule s = parse(
      "F0 sa0>1 F1 sa1>1 rg0<1 B0 rg1<1 B1 S\n"
      "ra0<0 F0 B0 sg0>0 ra1<0 F1 B1 sg1>0 S\n");
  ASSERT_NO_THROW(validate(s));
  EXPECT_EQ(stream_error_of(s), "(valid)");
}

// Data-parallel replicas over NCCL: the ordered reduction's running sums go on the stream too (an ncclSend of
// a chunk's gradients waits for the next replica's receive), between the pipeline's messages. Every replicated
// schedule the validator accepts must, after the pass, be proved free of deadlock with the sums included.
TEST(StreamOrder, EveryReplicatedScheduleIsSafeUnderNcclAfterThePass) {
  int checked = 0, streamed = 0;
  for (const std::string name : {"1f1b", "zb-h1", "gpipe", "interleaved", "zb-v"})
    for (int ranks = 1; ranks <= 3; ++ranks)
      for (int chunks = 1; chunks <= 2; ++chunks) {
        if ((name == "interleaved" || name == "zb-v") != (chunks == 2)) continue;
        for (int replicas = 2; replicas <= 3; ++replicas)
          for (int m : {2, 4, 6})
            for (int group : {1, 2}) {
              if (m % group != 0 || (name == "interleaved" && m % ranks != 0)) continue;
              Replicated r;
              try {
                r = order_reduction(lower(generate(name, ranks, m, chunks)), replicas, group);
                validate(r);
              } catch (const InputError&) {
                continue;  // a layout the validator refuses (chunks waiting on each other's sums)
              }
              const Replicated ordered = order_for_streams(r);
              const std::string what = name + " p=" + std::to_string(ranks) + " d=" + std::to_string(replicas) +
                                       " m=" + std::to_string(m) + " g=" + std::to_string(group);
              EXPECT_NO_THROW(validate(ordered)) << what;
              // The sums by MPI (what the runtime falls back to) are always safe; on the stream they are
              // where the proof says so, which includes every pure data-parallel 1F1B.
              EXPECT_NO_THROW(validate_stream_order(ordered, SumRoute::ordered_by_mpi)) << what;
              const bool on_stream = stream_error_of(ordered) == "(valid)";
              if (name == "1f1b" && ranks == 1) {
                EXPECT_TRUE(on_stream) << what << ": " << stream_error_of(ordered);
              }
              streamed += on_stream;
              EXPECT_EQ(stream_error_of(allreduce_replicas(order_for_streams(lower(generate(name, ranks, m, chunks))),
                                                           replicas)),
                        "(valid)")
                  << what << " allreduce";
              ++checked;
            }
      }
  EXPECT_GT(checked, 50);
  EXPECT_GT(streamed, 0);
}

// 1F1B on 2 ranks with 2 replicas: replica 0's first stage sends its sum on (blocking its stream) while its
// last stage waits for that stage's gradient receive; replica 1's first stage waits in a send to its last
// stage, which waits in its own sum's send to replica 0's last stage. By MPI the sums never block.
TEST(StreamOrder, SumsOnTheStreamCanCloseACycleThatMpiSumsDoNot) {
  const Replicated r = order_for_streams(order_reduction(lower(generate("1f1b", 2, 2, 1)), 2, 1));
  EXPECT_NE(stream_error_of(r).find("schedule deadlock in stream order"), std::string::npos) << stream_error_of(r);
  EXPECT_NO_THROW(validate_stream_order(r, SumRoute::ordered_by_mpi));
}

// Replica 1 receives chunk 1's sum before chunk 0's while replica 0 sends chunk 0's first: MPI matches the
// sums by tag (the group) and runs it; NCCL would add chunk 0's gradients to chunk 1's.
TEST(StreamOrder, SumsOutOfSendOrderAreRejected) {
  Replicated r;
  r.ordered = true;
  r.replicas = {parse("F0.0 F0.1 B0.1 B0.0 ss1.0>1 ss1.1>1 S\n"),
                parse("F0.0 F0.1 I0.1 rs1.1<0 W0.1 I0.0 rs1.0<0 W0.0 S\n")};
  EXPECT_NE(stream_error_of(r).find("schedule replica 1 rank 0 position 3"), std::string::npos) << stream_error_of(r);
  EXPECT_NE(stream_error_of(r).find("order the sums alike"), std::string::npos) << stream_error_of(r);
}

// Each replica sends its sum before it receives the other's: MPI's buffered sends would run it, but under
// NCCL both sends wait for receives that come after them.
TEST(StreamOrder, SumsThatWaitForEachOtherDeadlock) {
  Replicated r;
  r.ordered = true;
  r.replicas = {parse("F0 B0 ss1>1 rs2<1 F1 B1 S\n"), parse("F0 B0 ss2>0 rs1<0 F1 B1 S\n")};
  EXPECT_NE(stream_error_of(r).find("schedule deadlock in stream order"), std::string::npos) << stream_error_of(r);
  EXPECT_NE(stream_error_of(r).find("replica 0 rank 0 position 2 (ss1>1) waits for replica 1 rank 0 to reach position 3 "
                                    "(rs1<0)"),
            std::string::npos)
      << stream_error_of(r);
}

}  // namespace
}  // namespace kpipe::schedule
