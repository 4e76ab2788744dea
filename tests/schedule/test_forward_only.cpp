// Forward-only lists (evaluation, generation) go through the pass pipeline like training's: lowered, validated
// after each pass, and on a stream-ordered delivery ordered for streams and proved.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "kpipe/schedule/forward_only.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/stream_order.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {
namespace {

// Placements as training runs them: one chunk a rank, interleaved chunks, and zb-v's V.
std::vector<Schedule> placements(int ranks) {
  std::vector<Schedule> out = {one_f_one_b(ranks, ranks)};
  for (int chunks : {2, 3}) out.push_back(interleaved(ranks, ranks, chunks));
  out.push_back(zero_bubble_v(ranks, 2 * ranks));
  return out;
}

TEST(ForwardOnly, ListsPassTheValidatorAndTheStreamOrderProof) {
  for (int p = 1; p <= 4; ++p)
    for (const Schedule& placement : placements(p))
      for (int m = 1; m <= 5; ++m)
        for (const Delivery delivery : {Delivery::buffered, Delivery::stream_ordered}) {
          SCOPED_TRACE(fmt::format("p = {}, v = {}, m = {}, stream-ordered {}", p, placement.chunks, m,
                                   delivery == Delivery::stream_ordered));
          const Plan plan = forward_only(placement, m, delivery);
          ASSERT_EQ(plan.run.replica_count(), 1);
          const Schedule& lists = plan.run.replicas.front();
          EXPECT_TRUE(lists.forward_only);
          EXPECT_TRUE(p == 1 || is_lowered(lists));  // one rank sends nothing
          EXPECT_NO_THROW(validate(lists));
          EXPECT_NO_THROW(validate(plan.run));
          EXPECT_EQ(stream_order_violation(lists), "");
          EXPECT_EQ(stream_order_violation(plan.run, plan.sums), "");
          if (p > 1) {
            EXPECT_EQ(plan.passes.at(1), "lower");
          }
          if (delivery == Delivery::stream_ordered) {
            EXPECT_EQ(plan.passes.back().rfind("order_for_streams", 0), 0u) << passes_text(plan);
            // A chain of forwards already receives where a stream runs it: the buffered lists, unchanged (so the
            // memory plan's evaluation buffers are the same on either delivery).
            EXPECT_EQ(to_text(lists), to_text(forward_only(placement, m, Delivery::buffered).run.replicas.front()));
          }
        }
}

TEST(ForwardOnly, EachRankForwardsEveryMicroBatchOnItsChunksInOrder) {
  // Two ranks, two chunks each: virtual stages 0 and 2 on rank 0, 1 and 3 on rank 1.
  const Schedule lists = strip_messages(forward_only(interleaved(2, 2, 2), 2, Delivery::buffered).run.replicas.front());
  const std::vector<Action> want = {{Op::forward, 0, 0, -1}, {Op::forward, 0, 1, -1}, {Op::forward, 1, 0, -1},
                                    {Op::forward, 1, 1, -1}, {Op::step, 0, 0, -1}};
  EXPECT_EQ(lists.actions.at(0), want);
  EXPECT_EQ(lists.actions.at(1), want);
}

}  // namespace
}  // namespace kpipe::schedule
