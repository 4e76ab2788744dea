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

// What the trainer runs over NCCL: the generated schedule, lowered, through order_for_streams(); it must pass
// both validators. 1F1B and ZB-H1 need no move; GPipe with chunks and interleaved schedules pass activations
// both ways between two ranks and do.
TEST(StreamOrder, EveryGeneratedScheduleIsSafeUnderNcclAfterThePass) {
  int checked = 0, changed = 0;
  for (const std::string& name : schedule_names())
    for (int ranks = 1; ranks <= 6; ++ranks)
      for (int chunks = 1; chunks <= (name == "interleaved" || name == "gpipe" || name == "naive" ? 3 : 1); ++chunks)
        for (int m = 1; m <= 12; ++m) {
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
  EXPECT_GT(checked, 600);
  EXPECT_GT(changed, 0);
}

TEST(StreamOrder, GPipeWithChunksDeadlocksWithoutThePass) {
  // p = 2, v = 2: rank 1 sends chunk 0's output back to rank 0 while rank 0 still sends it activations.
  const Schedule s = lower(gpipe(2, 4, 2));
  ASSERT_NO_THROW(validate(s));
  EXPECT_NE(stream_error_of(s).find("deadlocks under NCCL"), std::string::npos) << stream_error_of(s);
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
            "schedule deadlocks under NCCL (messages in stream order, sends wait for their receives): schedule rank 0 "
            "position 3 (sa1>1) waits for rank 1 to reach position 5 (ra1<0), but that rank is held at position 3; "
            "schedule rank 1 position 3 (sg0>0) waits for rank 0 to reach position 6 (rg0<1), but that rank is held "
            "at position 3");
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

}  // namespace
}  // namespace kpipe::schedule
