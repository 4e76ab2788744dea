// Validator: each kind of error is caught and named by rank, position and action.
#include <gtest/gtest.h>

#include <utility>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

#include "support/validation_error.hpp"

namespace kpipe::schedule {
namespace {

void swap_actions(Schedule& s, int rank, int i, int j) { std::swap(s.actions[rank][i], s.actions[rank][j]); }

TEST(Validate, AcceptsHandWrittenSchedules) {
  EXPECT_EQ(test::validation_error("F0 F1 B0 B1 S\nF0 B0 F1 B1 S\n"), "(valid)");
  EXPECT_EQ(test::validation_error("F0 F1 I0 I1 W0 W1 S\nF0 I0 F1 I1 W0 W1 S\n"), "(valid)");
  EXPECT_EQ(test::validation_error("F0 sa0>1 rg0<1 B0 S\nra0<0 F0 B0 sg0>0 S\n"), "(valid)");
  // One rank, two chunks: chunk 0 hands over to chunk 1 locally.
  EXPECT_EQ(test::validation_error("F0.0 F0.1 B0.1 B0.0 S\n"), "(valid)");
}

TEST(Validate, SwapThatBreaksADependencyOnOneRank) {
  Schedule s = one_f_one_b(2, 2);  // rank 1: F0 B0 F1 B1 S
  swap_actions(s, 1, 0, 1);
  EXPECT_EQ(test::validation_error(s), "schedule rank 1 position 0 (B0): backward of micro-batch 0 before its forward");
}

TEST(Validate, SwapThatDeadlocks) {
  Schedule s = gpipe(2, 2);  // F0 F1 B0 B1 S on both ranks
  swap_actions(s, 0, 1, 2);  // rank 0: F0 B0 F1 B1 waits for rank 1, which waits for rank 0's F1
  EXPECT_EQ(test::validation_error(s),
            "schedule deadlock: rank 0 position 1 (B0) waits for the backward of micro-batch 0 on rank 1; "
            "rank 1 position 1 (F1) waits for the forward of micro-batch 1 on rank 0");
  // The same in lowered form: both ranks block in a receive.
  Schedule lowered = lower(one_f_one_b(2, 1));  // F0 sa0>1 rg0<1 B0 S / ra0<0 F0 B0 sg0>0 S
  std::swap(lowered.actions[0][0], lowered.actions[0][2]);  // rank 0 waits for the gradient before its forward
  std::swap(lowered.actions[0][1], lowered.actions[0][2]);
  EXPECT_EQ(to_text(lowered).substr(0, 18), "rg0<1 F0 sa0>1 B0 ");
  EXPECT_EQ(test::validation_error(lowered),
            "schedule deadlock: rank 0 position 0 (rg0<1) waits for the gradient of micro-batch 0 from rank 1; "
            "rank 1 position 0 (ra0<0) waits for the activation of micro-batch 0 from rank 0");
}

TEST(Validate, DroppedReceiveOrSend) {
  Schedule s = lower(one_f_one_b(2, 2));  // rank 1: ra0<0 F0 B0 sg0>0 ra1<0 F1 B1 sg1>0 S
  Schedule no_recv = s;
  no_recv.actions[1].erase(no_recv.actions[1].begin() + 4);
  EXPECT_EQ(test::validation_error(no_recv),
            "schedule rank 1 position 4 (F1): forward of micro-batch 1 without a receive of its activation from "
            "rank 0 before it");
  Schedule no_send = s;
  no_send.actions[1].erase(no_send.actions[1].begin() + 3);
  EXPECT_EQ(test::validation_error(no_send), "schedule rank 0 position 4 (rg0<1): receive from rank 1 has no matching send there");
  Schedule wrong_peer = lower(gpipe(3, 1));
  wrong_peer.actions[0][1].peer = 2;  // F0 then sa0>2: rank 0's next virtual stage is on rank 1
  EXPECT_EQ(test::validation_error(wrong_peer),
            "schedule rank 0 position 1 (sa0>2): the next virtual stage (1) is on rank 1, not rank 2");
  EXPECT_NE(test::validation_error("F0 sa0>1 sa0>1 rg0<1 B0 S\nra0<0 F0 B0 sg0>0 S\n").find("second send"), std::string::npos);
  EXPECT_NE(test::validation_error("F0 rg0<1 B0 S\nra0<0 F0 B0 sg0>0 sa0>0 S\n").find("virtual stage 1 has no next virtual stage"),
            std::string::npos);
  EXPECT_NE(test::validation_error("F0.0 sa0.0>0 F0.1 B0.1 B0.0 S\n").find("handed over locally"), std::string::npos);
  EXPECT_EQ(test::validation_error("F0 sa0>1 B0 rg0<1 S\nra0<0 F0 B0 sg0>0 S\n"),
            "schedule rank 0 position 2 (B0): backward of micro-batch 0 without a receive of its gradient from rank 1 "
            "before it");
  EXPECT_EQ(test::validation_error("F0 sa0>1 rg0<1 B0 rg0<1 S\nra0<0 F0 B0 sg0>0 S\n"),
            "schedule rank 0 position 4 (rg0<1): receive of the gradient of micro-batch 0 after its backward");
}

TEST(Validate, DuplicatedOrMissingComputeActions) {
  Schedule dup = one_f_one_b(2, 2);
  dup.actions[0].insert(dup.actions[0].begin() + 1, Action{Op::forward, 0, 0, -1});
  EXPECT_EQ(test::validation_error(dup), "schedule rank 0 position 1 (F0): second forward of micro-batch 0");
  EXPECT_EQ(test::validation_error("F0 F1 B0 S\nF0 B0 F1 B1 S\n"), "schedule rank 0: no backward of micro-batch 1");
  EXPECT_EQ(test::validation_error("F0 B0 S\nF0 B0 F1 B1 S\n"), "schedule rank 0: no forward of micro-batch 1");
  EXPECT_EQ(test::validation_error("F0 B0 B0 S\n"), "schedule rank 0 position 2 (B0): second backward of micro-batch 0");
  EXPECT_EQ(test::validation_error("F0 I0 S\n"), "schedule rank 0: input gradient (I) of micro-batch 0 without its weight gradient (W)");
  EXPECT_EQ(test::validation_error("F0 W0 I0 S\n"), "schedule rank 0 position 1 (W0): weight gradient of micro-batch 0 before its "
                                      "input gradient (I)");
  EXPECT_EQ(test::validation_error("F0 B0 W0 S\n"), "schedule rank 0 position 2 (W0): weight gradient of micro-batch 0 after its "
                                      "full backward B");
  EXPECT_EQ(test::validation_error("F0.0 F0.1 B0.1 S\n"), "schedule rank 0: no backward of micro-batch 0 chunk 0");
}

TEST(Validate, OptimizerStepExactlyOnceAtTheEnd) {
  EXPECT_EQ(test::validation_error("F0 B0\n"), "schedule rank 0: no optimizer step S at the end");
  EXPECT_EQ(test::validation_error("F0 S B0 S\n"), "schedule rank 0 position 1 (S): optimizer step before the end of the rank's actions");
  EXPECT_EQ(test::validation_error("F0 B0 S S\n"), "schedule rank 0 position 2 (S): optimizer step before the end of the rank's actions");
}

TEST(Validate, WeightGradientsInMicroBatchOrder) {
  EXPECT_EQ(test::validation_error("F0 F1 B1 B0 S\n"),
            "schedule rank 0 position 3 (B0): gradient of micro-batch 0 accumulated after micro-batch 1's on chunk 0 "
            "(gradients accumulate in micro-batch order, for bit-reproducibility)");
  EXPECT_NE(test::validation_error("F0 F1 I1 I0 W1 W0 S\n").find("position 5 (W0)"), std::string::npos);
  // Backwards of different chunks interleave freely.
  EXPECT_EQ(test::validation_error("F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0 S\n"), "(valid)");
}

TEST(Validate, ShapeAndRanges) {
  Schedule s = gpipe(2, 2);
  s.actions.pop_back();
  EXPECT_EQ(test::validation_error(s), "schedule: 1 action lists for 2 ranks");
  Schedule big = gpipe(2, 2);
  big.actions[1][0].microbatch = 7;
  EXPECT_EQ(test::validation_error(big), "schedule rank 1 position 0 (F7): micro-batch 7 out of range (2 micro-batches)");
  Schedule chunk = gpipe(2, 2);
  chunk.actions[0][0].chunk = 1;
  EXPECT_NE(test::validation_error(chunk).find("chunk 1 out of range (1 chunks)"), std::string::npos);
  Schedule peer = lower(gpipe(2, 1));
  peer.actions[0][1].peer = 5;
  EXPECT_NE(test::validation_error(peer).find("rank 5 out of range (2 ranks)"), std::string::npos);
}

TEST(Validate, PeakStashCountsUntilTheWeightGradient) {
  EXPECT_EQ(peak_stash(parse("F0 F1 I0 I1 W0 W1 S\n")), std::vector<int>{2});
  EXPECT_EQ(peak_stash(parse("F0 I0 W0 F1 I1 W1 S\n")), std::vector<int>{1});
  EXPECT_EQ(peak_stash(parse("F0 I0 F1 W0 I1 W1 S\n")), std::vector<int>{2});
}

}  // namespace
}  // namespace kpipe::schedule
