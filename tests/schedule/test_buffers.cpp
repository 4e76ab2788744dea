// The buffer plan: what the runtime's pools reach, from the list alone (the MPI memory test holds the
// runtime to it, byte for byte).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/forward_only.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {
namespace {

// Most (micro-batch, chunk) pairs between their I (or B) and their W (or B) at once, on `chunk`.
int most_between_input_and_weight(const std::vector<Action>& list, int chunk) {
  int open = 0, most = 0;
  for (const Action& a : list) {
    if (a.chunk != chunk) continue;
    if (is_backward(a.op)) most = std::max(most, ++open);
    if (is_weight_gradient(a.op)) --open;
  }
  return most;
}

TEST(Buffers, PoolsHoldExactlyTheStashWithOneChunkPerRank) {
  for (const std::string name : {"naive", "gpipe", "1f1b", "zb-h1"})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 8; ++m) {
        SCOPED_TRACE(fmt::format("{} p={} m={}", name, p, m));
        const Schedule s = lower(generate(name, p, m));
        const auto stash = peak_stash(s);
        for (int r = 0; r < p; ++r) {
          const BufferPlan plan = plan_buffers(s, r, s.actions[r]);
          EXPECT_EQ(plan.slots, std::vector<int>{stash[r]});
          EXPECT_EQ(plan.backward_sets, std::vector<int>{most_between_input_and_weight(s.actions[r], 0)});
          if (name != "zb-h1") {
            EXPECT_EQ(plan.backward_sets[0], 1);
          }
          if (p == 1) {
            EXPECT_EQ(plan.message_buffers, 0);
          }
        }
      }
}

TEST(Buffers, EveryReceiveIsPostedOnceAndInTimeAndEveryMicroBatchRetiredOnce) {
  for (const Schedule& base : {interleaved(3, 6, 2), zero_bubble_v(3, 5), one_f_one_b(4, 6)}) {
    const Schedule s = lower(base);
    for (int r = 0; r < s.ranks; ++r) {
      const auto& list = s.actions[r];
      const BufferPlan plan = plan_buffers(s, r, list);
      std::vector<int> posted(list.size(), 0), retired(s.chunks * s.microbatches, 0);
      for (std::size_t i = 0; i < list.size(); ++i) {
        for (std::size_t k : plan.post_before[i]) {
          EXPECT_TRUE(is_recv(list[k].op));
          EXPECT_GT(k, i) << "posted ahead of its own position";
          ++posted[k];
        }
        if (is_recv(list[i].op) && posted[i] == 0) ++posted[i];  // posted at its own position
        if (is_recv(list[i].op)) {
          EXPECT_GE(plan.spare[i], 0) << "a receive lands in a spare";
        }
        for (const int chunk : plan.retire[i]) ++retired[chunk * s.microbatches + list[i].microbatch];
      }
      for (std::size_t k = 0; k < list.size(); ++k) {
        if (is_recv(list[k].op)) {
          EXPECT_GE(posted[k], 1) << "position " << k;
        }
      }
      EXPECT_EQ(std::count(retired.begin(), retired.end(), 1), s.chunks * s.microbatches);
    }
  }
}

// Forward-only lists hand a micro-batch from chunk to chunk of one rank in place: a chunk's slot lives until the
// next chunk's forward has read its output, and then goes back (one slot per chunk however many micro-batches).
TEST(Buffers, ForwardOnlyListsKeepASlotUntilTheNextLocalChunkReadIt) {
  // One rank, three chunks: F0c0 F0c1 F0c2 F1c0 ...
  const Schedule s = forward_only(interleaved(1, 4, 3), 4, Delivery::buffered).run.replicas.front();
  const auto& list = s.actions[0];
  const BufferPlan plan = plan_buffers(s, 0, list);
  ASSERT_EQ(list[1], (Action{Op::forward, 0, 1, -1}));
  EXPECT_EQ(plan.retire[0], std::vector<int>{}) << "chunk 0's output is read next";
  EXPECT_EQ(plan.retire[1], std::vector<int>{0});
  EXPECT_EQ(plan.retire[2], (std::vector<int>{2, 1}));
  EXPECT_EQ(plan.slots, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(plan.message_buffers, 0);
}

// 1F1B on two ranks, two micro-batches, rank 1 (F0 B0 F1 B1): the first receive lands in a new buffer, the
// forward swaps it in and the slot's own input buffer becomes the spare the next receives use.
TEST(Buffers, AHandCountedCase) {
  const Schedule s = lower(one_f_one_b(2, 2));
  EXPECT_EQ(to_text(s), "F0 sa0>1 F1 sa1>1 rg0<1 B0 rg1<1 B1 S\nra0<0 F0 B0 sg0>0 ra1<0 F1 B1 sg1>0 S\n");
  const BufferPlan plan = plan_buffers(s, 1, s.actions[1]);
  EXPECT_EQ(plan.slots, std::vector<int>{1});
  EXPECT_EQ(plan.backward_sets, std::vector<int>{1});
  // Two spares: ra0 (posted at its own position: nothing computes before it) and ra1 (posted ahead by F0) land
  // in new buffers; sg0 reads the slot's input gradient until its delivery point (the list's end), so retiring
  // micro-batch 0 at sg0 detaches it, the spare F0 freed taking its place.
  EXPECT_EQ(plan.message_buffers, 2);
  EXPECT_EQ(plan.post_before[0], std::vector<std::size_t>{});
  // The indices the runtime follows: ra0 lands in spare 0 and ra1, posted by F0, in spare 1 (both new); F0
  // takes slot 0 and its former input buffer becomes spare 0; retiring micro-batch 0 at sg0 detaches the slot's
  // input gradient, spare 0 taking its place; F1 takes slot 0 again, its former input becoming spare 0, which
  // sg1's detach takes; at the list's end sg0's buffer goes back to spare 0, sg1's to spare 1.
  EXPECT_EQ(plan.post_before[1], std::vector<std::size_t>{4});
  EXPECT_EQ((std::vector<int>{plan.spare[0], plan.spare[4]}), (std::vector<int>{0, 1}));
  EXPECT_EQ((std::vector<int>{plan.slot[1], plan.spare[1], plan.slot[5], plan.spare[5]}), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ((std::vector<int>{plan.backward_set[2], plan.backward_set[6]}), (std::vector<int>{0, 0}));
  ASSERT_EQ(plan.detach[3].size(), 1u);
  EXPECT_EQ(plan.detach[3][0].send, 3u);
  EXPECT_EQ(plan.detach[3][0].spare, 0);
  EXPECT_EQ((std::vector<int>{plan.spare[3], plan.spare[7]}), (std::vector<int>{0, 1}));
}

// A long asynchronous run repeats the lists' template step, running its planned indices every time: the plan
// refuses (std::logic_error) lists whose template step does not leave the buffers as it found them. Every
// rule, layout and resume holds, and each list ends with nothing held.
TEST(Buffers, TheRepeatedAsynchronousStepLeavesTheBuffersAsItFoundThem) {
  for (const Updates updates : {Updates::pipedream, Updates::vertical_sync, Updates::two_bw})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 8; ++m)
        for (const bool resumed : {false, true}) {
          if (updates == Updates::two_bw && m < p) continue;
          SCOPED_TRACE(fmt::format("{} p={} m={} resumed={}", to_string(updates), p, m, resumed));
          const Horizon horizon{p, m};
          const Schedule s = lower(asynchronous(updates, p, m, {horizon.steps(), resumed}));
          for (int r = 0; r < p; ++r) {
            BufferPlan plan;
            ASSERT_NO_THROW(plan = plan_buffers(s, r, s.actions[r]));
            ASSERT_EQ(int(plan.held_after_step.size()), s.steps);
            EXPECT_EQ(plan.held_after_step.back(), HeldSlots(1)) << "the last step drains the pipeline";
          }
        }
}

}  // namespace
}  // namespace kpipe::schedule
