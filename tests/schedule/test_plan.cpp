// The pass pipeline: the passes a configuration's lists go through, in order, each validated; how the
// replicas' gradient sums travel, decided and returned; bad configurations named by their key, the same on
// every call; and the asynchronous schedules on stream-ordered delivery, their receives moved before the
// step boundaries and proved with the boundary as a barrier.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/interpret.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/stream_order.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

#include "support/input_error.hpp"

namespace kpipe::schedule {
namespace {

Config layout(ScheduleKind schedule, int stages, int microbatches, int replicas = 1, int chunks = 1) {
  Config c;
  c.pipeline.schedule = schedule;
  c.pipeline.pipeline_size = stages;
  c.pipeline.data_parallel = replicas;
  c.pipeline.chunks = chunks;
  c.train.microbatches = microbatches;
  c.train.batch = microbatches;
  c.train.steps = 100;
  return c;
}

// The actions of a list other than receives, in order: what a pass that only moves receives keeps.
std::vector<Action> without_receives(const std::vector<Action>& list) {
  std::vector<Action> kept;
  for (const Action& a : list)
    if (!is_recv(a.op)) kept.push_back(a);
  return kept;
}

TEST(Plan, AppliesThePassesInOrderAndSaysWhereTheSumsGo) {
  const Config c = layout(ScheduleKind::one_f_one_b, 2, 4, 2);
  const Plan mpi = plan(c, Delivery::buffered);
  EXPECT_EQ(mpi.passes,
            (std::vector<std::string>{"generate 1f1b (p = 2, m = 2)", "lower", "order_reduction (2 replicas, groups of 1)"}));
  EXPECT_EQ(mpi.run, order_reduction(lower(generate("1f1b", 2, 2)), 2, 1));
  EXPECT_EQ(mpi.sums, SumRoute::ordered_on_transport);
  EXPECT_EQ(mpi.delivery, Delivery::buffered);

  // On a stream, 1F1B's sums on 2 ranks and 2 replicas close a cycle (test_stream_order.cpp): they go by MPI,
  // and the plan says so instead of throwing.
  const Plan nccl = plan(c, Delivery::stream_ordered);
  EXPECT_EQ(nccl.passes.back(), "order_for_streams (0 receives moved)");
  EXPECT_EQ(nccl.run, order_for_streams(mpi.run));
  EXPECT_EQ(nccl.sums, SumRoute::ordered_by_mpi);
  EXPECT_NE(stream_order_violation(nccl.run, SumRoute::ordered_on_transport), "");
  EXPECT_EQ(stream_order_violation(nccl.run, nccl.sums), "");

  // Pure data parallelism streams its sums; one replica has none; allreduce says so.
  EXPECT_EQ(plan(layout(ScheduleKind::one_f_one_b, 1, 4, 2), Delivery::stream_ordered).sums,
            SumRoute::ordered_on_transport);
  EXPECT_EQ(plan(layout(ScheduleKind::one_f_one_b, 2, 4), Delivery::stream_ordered).sums, SumRoute::none);
  Config allreduce = c;
  allreduce.pipeline.dp_reduction = DpReduction::allreduce;
  EXPECT_EQ(plan(allreduce, Delivery::stream_ordered).sums, SumRoute::allreduce);
  EXPECT_EQ(plan(allreduce, Delivery::buffered).passes.back(), "allreduce_replicas (2 replicas)");
}

TEST(Plan, StreamOrderMovesTheReceivesInterleavedSchedulesNeed) {
  const Plan mpi = plan(layout(ScheduleKind::interleaved, 2, 4, 1, 2), Delivery::buffered);
  const Plan nccl = plan(layout(ScheduleKind::interleaved, 2, 4, 1, 2), Delivery::stream_ordered);
  EXPECT_EQ(passes_text(nccl),
            "generate interleaved (p = 2, m = 4, v = 2) -> lower -> order_for_streams (4 receives moved)");
  EXPECT_NE(nccl.run, mpi.run);
  EXPECT_NE(stream_order_violation(mpi.run, SumRoute::none), "");
  EXPECT_EQ(stream_order_violation(nccl.run, SumRoute::none), "");
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(without_receives(nccl.run.replicas[0].actions[r]), without_receives(mpi.run.replicas[0].actions[r]));
}

TEST(Plan, BadConfigurationsNameTheKeyTheSameEveryTime) {
  struct Case {
    Config config;
    std::vector<std::string> parts;
    PlanOptions options;
  };
  std::vector<Case> cases;
  cases.push_back({layout(ScheduleKind::one_f_one_b, 2, 3, 2), {"train.microbatches = 3", "pipeline.data_parallel = 2"}, PlanOptions{}});
  cases.push_back({layout(ScheduleKind::pipedream, 2, 4, 1, 2), {"pipeline.chunks = 2", "pipedream"}, PlanOptions{}});
  Config grouped = layout(ScheduleKind::pipedream, 2, 4, 2);
  grouped.pipeline.dp_reduction_group = 2;
  cases.push_back({grouped, {"pipeline.dp_reduction_group = 2", "pipedream"}, PlanOptions{}});
  Config chunk_groups = layout(ScheduleKind::interleaved, 2, 12, 2, 2);
  chunk_groups.pipeline.dp_reduction_group = 3;
  cases.push_back({chunk_groups, {"pipeline.dp_reduction_group = 3 with 2 chunks per rank", "schedule deadlock"}, PlanOptions{}});
  cases.push_back({layout(ScheduleKind::two_bw, 4, 2), {"train.microbatches = 2", "pipeline.pipeline_size = 4"}, PlanOptions{}});
  cases.push_back({layout(ScheduleKind::pipedream, 2, 4), {"train.steps = 100", "step 100"}, PlanOptions{100}});
  Config file = layout(ScheduleKind::one_f_one_b, 2, 4);
  file.pipeline.schedule_file = "/nonexistent/kpipe.sched";
  cases.push_back({file, {"pipeline.schedule_file", "/nonexistent/kpipe.sched"}, PlanOptions{}});
  for (const Case& bad : cases)
    for (const Delivery delivery : {Delivery::buffered, Delivery::stream_ordered}) {
      const auto once = [&] { plan(bad.config, delivery, bad.options); };
      test::expect_input_error(once, bad.parts);
      EXPECT_EQ(test::input_error_of(once), test::input_error_of(once));
    }
}

// Issue 22 item 3: every asynchronous rule on stream-ordered delivery, fresh and resumed, with 1 and 2
// replicas, passes the proof after the pass (the step boundary a barrier) and the validator; the pass only
// moves receives; without it the same lists fail the proof.
TEST(Plan, AsynchronousSchedulesRunInStreamOrderAfterThePass) {
  int checked = 0, multi_stage = 0, failing_without = 0;
  for (const ScheduleKind kind : {ScheduleKind::pipedream, ScheduleKind::two_bw})
    for (const int vertical_sync : {0, 1})
      for (int p = 1; p <= 6; ++p)
        for (int m = 1; m <= 8; ++m)
          for (const int replicas : {1, 2})
            for (const std::int64_t first_step : {0, 7}) {
              if ((kind == ScheduleKind::two_bw && (vertical_sync == 1 || m < p))) continue;
              Config c = layout(kind, p, m * replicas, replicas);
              c.pipeline.vertical_sync = vertical_sync;
              const std::string what = fmt::format("{}{} p={} m={} d={} first step {}", kind,
                                                   vertical_sync ? " vertical-sync" : "", p, m, replicas, first_step);
              const Plan mpi = plan(c, Delivery::buffered, {first_step});
              Plan nccl;
              ASSERT_NO_THROW(nccl = plan(c, Delivery::stream_ordered, {first_step})) << what;
              EXPECT_NO_THROW(validate(nccl.run)) << what;
              EXPECT_EQ(stream_order_violation(nccl.run, nccl.sums), "") << what;
              EXPECT_EQ(nccl.sums, replicas == 1 ? SumRoute::none : SumRoute::ordered_on_transport) << what;
              EXPECT_EQ(nccl.passes.front().find("resumed") != std::string::npos, first_step > 0) << what;
              for (int r = 0; r < p; ++r)
                EXPECT_EQ(without_receives(nccl.run.replicas[0].actions[r]),
                          without_receives(mpi.run.replicas[0].actions[r]))
                    << what << " rank " << r;
              const std::string without = stream_order_violation(mpi.run, mpi.sums);
              if (p > 1) {
                ++multi_stage;
                EXPECT_NE(without, "") << what << ": the lists need the pass";
                failing_without += without.find("step boundary") != std::string::npos;
              }
              ++checked;
            }
  EXPECT_GT(checked, 500);
  // Every multi-stage run sends across a step boundary (the last forward of a step's 1F1B pairs is the next
  // step's micro-batch): without the pass each is held at the barrier the proof adds.
  EXPECT_EQ(failing_without, multi_stage);
}

// A run longer than the lists repeats their template step shifted (asynchronous.hpp's step_source): after
// the pass the repeated step must still be what a proved run of that length runs. The lists of a longer
// horizon, through the same pass, equal step by step what the runtime makes of the horizon's.
TEST(Plan, TheTemplateStepStillRepeatsAfterTheStreamOrderPass) {
  for (const Updates u : {Updates::pipedream, Updates::vertical_sync, Updates::two_bw})
    for (int p = 2; p <= 5; ++p)
      for (int m : {1, 2, 3, 4, 8}) {
        if (u == Updates::two_bw && m < p) continue;
        SCOPED_TRACE(fmt::format("{} p={} m={}", to_string(u), p, m));
        const Horizon h{p, m};
        const int longer = h.steps() + 3;
        const Plan run = plan(asynchronous(u, p, m, {h.steps(), false}), "generate", {}, Delivery::stream_ordered);
        const Plan proved = plan(asynchronous(u, p, m, {longer, false}), "generate", {}, Delivery::stream_ordered);
        const Schedule& lists = run.run.replicas[0];
        for (int r = 0; r < p; ++r) {
          const auto steps = step_ranges(lists.actions[r]);
          const auto proved_steps = step_ranges(proved.run.replicas[0].actions[r]);
          for (int i = 0; i < longer; ++i) {
            const StepSource source = step_source(h.steps(), h.template_step(), longer, i);
            const auto [b, e] = steps[source.step];
            const auto [pb, pe] = proved_steps[i];
            ASSERT_EQ(e - b, pe - pb) << "rank " << r << " step " << i;
            for (std::size_t k = 0; k < e - b; ++k)
              ASSERT_EQ(shifted(lists.actions[r][b + k], lists, source.shift, 0),
                        proved.run.replicas[0].actions[r][pb + k])
                  << "rank " << r << " step " << i << " action " << k;
          }
        }
      }
}

// The lists a resumed run executes are validated and proved as a fresh run's are.
TEST(Plan, AResumedAsynchronousRunIsPlannedFromItsStep) {
  Config c = layout(ScheduleKind::pipedream, 3, 3);
  c.train.steps = 9;
  const Plan fresh = plan(c, Delivery::stream_ordered);
  const Plan resumed = plan(c, Delivery::stream_ordered, {6});
  EXPECT_EQ(fresh.run.replicas[0].steps, (Horizon{3, 3}.steps()));
  EXPECT_EQ(resumed.run.replicas[0].steps, 3);  // the steps left
  EXPECT_EQ(resumed.run.replicas[0].versions_at_start, (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(resumed.passes.front(), "generate pipedream resumed at step 6 (p = 3, m = 3, 3 steps)");
  EXPECT_EQ(stream_order_violation(resumed.run, resumed.sums), "");
}

}  // namespace
}  // namespace kpipe::schedule
