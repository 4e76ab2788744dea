// What a run of planned lists stages, holds and repeats, asked alike of both kinds of schedule
// (schedule/run_steps.hpp), and whether a replica holds an update's running sum (plan.hpp): each answer is
// the one the runtime, the memory plan and the partition all read, so each is checked on both kinds here.
#include <gtest/gtest.h>

#include <vector>

#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/run_steps.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {
namespace {

Config run_layout(ScheduleKind schedule, int stages, int microbatches, int steps, int replicas = 1) {
  Config c;
  c.pipeline.schedule = schedule;
  c.pipeline.pipeline_size = stages;
  c.pipeline.data_parallel = replicas;
  c.train.microbatches = microbatches * replicas;  // the whole mini-batch's
  c.train.batch = microbatches * replicas;
  c.train.steps = steps;
  return c;
}

TEST(RunSteps, ASynchronousRunRepeatsItsOneStep) {
  const Config c = run_layout(ScheduleKind::one_f_one_b, 4, 8, 100);
  const Plan planned = plan(c, Delivery::buffered);
  const Schedule& lists = planned.run.replicas.front();
  EXPECT_EQ(staged_microbatches(lists), 8);
  EXPECT_EQ(template_step(lists), 0);
  EXPECT_EQ(run_stash(planned.run, c.train.steps), (std::vector<int>{4, 3, 2, 1}));
  for (const auto& list : lists.actions)  // one step, the whole list
    EXPECT_EQ(step_ranges(list), (std::vector<std::pair<std::size_t, std::size_t>>{{0, list.size()}}));
}

TEST(RunSteps, AnAsynchronousRunStagesAndHoldsWhatRunsOnAcrossSteps) {
  Config c = run_layout(ScheduleKind::pipedream, 4, 8, 100);
  const Plan fresh = plan(c, Delivery::buffered);
  const Schedule& lists = fresh.run.replicas.front();
  EXPECT_EQ(staged_microbatches(lists), 8 + 3);  // its p - 1 micro-batches in flight run on into the next step
  EXPECT_EQ(template_step(lists), (Horizon{4, 8}.template_step()));
  EXPECT_GT(template_step(lists), 0);
  EXPECT_EQ(step_ranges(lists.actions.front()).size(), std::size_t(lists.steps));
  // One micro-batch per step, resumed at its last step: the lists hold one per stage where the run held
  // p - s; the run's answer is the run's.
  c = run_layout(ScheduleKind::pipedream, 4, 1, 6);
  const Plan last = plan(c, Delivery::buffered, {5});
  EXPECT_EQ(peak_stash(last.run.replicas.front()), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(run_stash(last.run, c.train.steps), (std::vector<int>{4, 3, 2, 1}));
}

TEST(RunSteps, OnlyLaterReplicasOfAnAsynchronousRunSummedInOrderHoldTheRunningSum) {
  Config c = run_layout(ScheduleKind::pipedream, 2, 4, 10, 3);
  const Plan ordered = plan(c, Delivery::buffered);
  EXPECT_EQ(ordered.sums, SumRoute::ordered_on_transport);
  EXPECT_FALSE(holds_update_sum(ordered, 0));
  EXPECT_TRUE(holds_update_sum(ordered, 1));
  EXPECT_TRUE(holds_update_sum(ordered, 2));
  c.pipeline.dp_reduction = DpReduction::allreduce;
  const Plan summed = plan(c, Delivery::buffered);
  for (int replica = 0; replica < 3; ++replica) EXPECT_FALSE(holds_update_sum(summed, replica));
  // Synchronous replicas receive their sums into the gradients themselves.
  c = run_layout(ScheduleKind::one_f_one_b, 2, 4, 10, 3);
  const Plan flushed = plan(c, Delivery::buffered);
  EXPECT_NE(flushed.sums, SumRoute::none);
  for (int replica = 0; replica < 3; ++replica) EXPECT_FALSE(holds_update_sum(flushed, replica));
}

}  // namespace
}  // namespace kpipe::schedule
