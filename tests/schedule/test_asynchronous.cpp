// Asynchronous schedules (PipeDream, vertical sync, PipeDream-2BW): the generator follows the version rule,
// the validator catches each broken rule by rank, position and action, the versions held match the theory,
// the text form round-trips, the simulator finds no bubble in the steady state.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"
#include "kpipe/schedule/versions.hpp"

#include "support/validation_error.hpp"

namespace kpipe::schedule {
namespace {

constexpr Updates all_rules[] = {Updates::pipedream, Updates::vertical_sync, Updates::two_bw};

// Where the first action matching `pred` sits on `rank`.
template <class Pred> std::size_t find_on(const Schedule& s, int rank, Pred pred) {
  const auto& list = s.actions[rank];
  return std::size_t(std::find_if(list.begin(), list.end(), pred) - list.begin());
}

TEST(Asynchronous, PipeDreamWithTwoRanksIsOneFOneBWithAnUpdateAfterEveryBackward) {
  const Schedule s = asynchronous(Updates::pipedream, 2, 2, {2, false});
  EXPECT_EQ(to_text(s),
            "updates pipedream\n"
            "F0@0 F1@0 B0@0 U0@1 F2@1 B1@0 U1@2 S F3@2 B2@1 U2@3 B3@2 U3@4 S\n"
            "F0@0 B0@0 U0@1 F1@1 B1@1 U1@2 S F2@2 B2@2 U2@3 F3@3 B3@3 U3@4 S\n");
  EXPECT_EQ(test::validation_error(s), "(valid)");
  EXPECT_EQ(test::validation_error(lower(s)), "(valid)");
}

TEST(Asynchronous, VerticalSyncReadsStageZerosVersionEverywhere) {
  const Schedule s = asynchronous(Updates::vertical_sync, 2, 2, {2, false});
  EXPECT_EQ(s.actions[1][0], (Action{Op::forward, 0, 0, -1, 0}));
  // Micro-batch 2 reads version 1 on stage 0 (one update applied there when it starts) and so on stage 1,
  // where the newest is version 2 by then.
  for (int r = 0; r < 2; ++r) {
    const auto at = find_on(s, r, [](const Action& a) { return a.op == Op::forward && a.microbatch == 2; });
    EXPECT_EQ(s.actions[r][at].version, 1) << "rank " << r;
  }
  EXPECT_EQ(test::validation_error(lower(s)), "(valid)");
}

TEST(Asynchronous, TwoBWUpdatesOncePerWindowAndOnlyItsFirstPMinusOneReadTheVersionBefore) {
  // Micro-batch 2 (window 1's first) is forwarded on rank 0 before update 1: it reads version 0 on both ranks;
  // micro-batch 3 is forwarded after it and reads version 1, the newest, on both.
  const Schedule s = asynchronous(Updates::two_bw, 2, 2, {3, false});
  EXPECT_EQ(to_text(s),
            "updates 2bw\n"
            "F0@0 F1@0 B0@0 F2@0 B1@0 U1@1 S F3@1 B2@0 F4@1 B3@1 U3@2 S F5@2 B4@1 B5@2 U5@3 S\n"
            "F0@0 B0@0 F1@0 B1@0 U1@1 S F2@0 B2@0 F3@1 B3@1 U3@2 S F4@1 B4@1 F5@2 B5@2 U5@3 S\n");
  EXPECT_EQ(test::validation_error(lower(s)), "(valid)");
}

TEST(Asynchronous, EveryRuleValidatesOnEveryShapeAndHoldsTheTheorysVersions) {
  for (Updates u : all_rules)
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 4, 8}) {
        if (u == Updates::two_bw && m < p) continue;
        for (bool resumed : {false, true}) {
          SCOPED_TRACE(fmt::format("{} p={} m={} resumed={}", to_string(u), p, m, resumed));
          const int steps = Horizon{p, m}.steps();
          const Schedule s = lower(asynchronous(u, p, m, {steps, resumed}));
          ASSERT_EQ(test::validation_error(s), "(valid)");
          const auto held = versions_held(s);
          for (int r = 0; r < p; ++r) {
            // The bound is reached once the pipeline is full.
            EXPECT_EQ(held[r], versions_bound(u, p, r)) << "rank " << r;
          }
        }
      }
}

TEST(Asynchronous, WithOneStagePipeDreamIsPlainTrainingOneMicroBatchPerUpdate) {
  const Schedule s = asynchronous(Updates::pipedream, 1, 3, {1, false});
  EXPECT_EQ(to_text(s), "updates pipedream\nF0@0 B0@0 U0@1 F1@1 B1@1 U1@2 F2@2 B2@2 U2@3 S\n");
}

TEST(Asynchronous, BadCombinationsNameTheirKey) {
  try {
    asynchronous(Updates::two_bw, 4, 2);
    FAIL() << "2bw with m < p accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("train.microbatches = 2 per pipeline is below pipeline.pipeline_size = 4", 0),
              0u)
        << e.what();
  }
  EXPECT_THROW(asynchronous(Updates::flush, 2, 2), InputError);
}

TEST(Asynchronous, ValidatorCatchesABackwardOnAnotherVersionThanItsForward) {
  Schedule s = asynchronous(Updates::pipedream, 2, 2, {2, false});
  auto& b1 = s.actions[0][5];  // B1@0 on rank 0
  ASSERT_EQ(b1.op, Op::backward);
  b1.version = 1;
  EXPECT_EQ(test::validation_error(s),
            "schedule rank 0 position 5 (B1@1): backward of micro-batch 1 reads version 1, its forward read version 0 "
            "(weight stashing: the same)");
}

TEST(Asynchronous, ValidatorCatchesAForwardOffTheRule) {
  // Rank 0, pipedream, p = 2: F2 reads version 1 (one update applied when it starts); 0 is still held but
  // the rule reads the newest.
  EXPECT_EQ(test::validation_error("updates pipedream\n"
                     "F0@0 F1@0 B0@0 U0@1 F2@0 B1@0 U1@2 S F3@2 B2@0 U2@3 B3@2 U3@4 S\n"
                     "F0@0 B0@0 U0@1 F1@1 B1@1 U1@2 S F2@2 B2@2 U2@3 F3@3 B3@3 U3@4 S\n"),
            "schedule rank 0 position 4 (F2@0): reads version 0; the pipedream rule says 1");
  // A version not held yet.
  EXPECT_EQ(test::validation_error("updates pipedream\nF0@1 B0@1 U0@1 S\n"),
            "schedule rank 0 position 0 (F0@1): reads version 1, which chunk 0 does not hold (versions 0 to 0 so far)");
}

TEST(Asynchronous, ValidatorCatchesUpdatesOutOfOrderOrMissing) {
  EXPECT_EQ(test::validation_error("updates pipedream\nF0@0 B0@0 U0@2 S\n"),
            "schedule rank 0 position 2 (U0@2): produces version 2, but the newest is 0 (each update produces the "
            "next)");
  EXPECT_EQ(test::validation_error("updates pipedream\nF0@0 F1@0 B0@0 B1@0 U1@1 S\nF0@0 B0@0 U0@1 F1@1 B1@1 U1@2 S\n"),
            "schedule rank 0 position 4 (U1@1): pipedream updates after every backward (one micro-batch each)");
  EXPECT_EQ(test::validation_error("updates 2bw\nF0@0 B0@0 U0@1 F1@0 B1@0 U1@2 S\n"),
            "schedule rank 0 position 2 (U0@1): 2bw updates once per window of 2 micro-batches (a step's)");
  // A step boundary before its micro-batches' updates.
  EXPECT_EQ(test::validation_error("updates pipedream\nF0@0 B0@0 S U0@1 F1@1 B1@1 U1@2 S\n"),
            "schedule rank 0 position 2 (S): step 0 ends before the update of micro-batch 0 on chunk 0 (a step "
            "boundary holds its 1 micro-batches' updates)");
  // Updates in a synchronous schedule.
  EXPECT_EQ(test::validation_error("F0 B0 U0 S\n"),
            "schedule rank 0 position 2 (U0): an update (U) in a synchronous schedule: its step S applies the "
            "gradients");
}

TEST(Asynchronous, ValidatorCatchesVerticalSyncBrokenOnALaterStage) {
  Schedule s = asynchronous(Updates::vertical_sync, 2, 2, {2, false});
  // Rank 1 reading its newest version for micro-batch 2 is pipedream's rule, not vertical sync's.
  const auto f2 = find_on(s, 1, [](const Action& a) { return a.op == Op::forward && a.microbatch == 2; });
  const auto b2 = find_on(s, 1, [](const Action& a) { return a.op == Op::backward && a.microbatch == 2; });
  s.actions[1][f2].version = s.actions[1][b2].version = 2;
  EXPECT_EQ(test::validation_error(s),
            fmt::format("schedule rank 1 position {} (F2@2): reads version 2; the vertical-sync rule says 1", f2));
}

TEST(Asynchronous, ValidatorCatchesTooManyVersionsHeld) {
  // Two stages: rank 1 may hold one version (p - s = 1). A backward delayed past the next update keeps two.
  EXPECT_EQ(test::validation_error("updates pipedream\n"
                     "F0@0 F1@0 B0@0 U0@1 F2@1 B1@0 U1@2 S F3@2 B2@1 U2@3 B3@2 U3@4 S\n"
                     "F0@0 F1@0 B0@0 U0@1 B1@0 U1@2 S F2@2 B2@2 U2@3 F3@3 B3@3 U3@4 S\n"),
            "schedule rank 1 position 1 (F1@0): reads version 0; the pipedream rule says 1");
}

TEST(Asynchronous, TextRoundTripsVersionsUpdatesAndResumedLists) {
  for (Updates u : all_rules)
    for (bool resumed : {false, true}) {
      const Schedule s = lower(asynchronous(u, 4, 4, {Horizon{4, 4}.steps(), resumed}));
      const Schedule back = parse(to_text(s));
      EXPECT_EQ(back, s) << to_string(u) << " resumed=" << resumed;
    }
  EXPECT_THROW(parse("resumed\nF0 B0 S\n"), InputError);
  EXPECT_THROW(parse("F0 B0 S\nupdates pipedream\n"), InputError);
}

TEST(Asynchronous, AResumedRunReadsTheVersionsTheCheckpointKept) {
  // p = 3, stage 0 holds 3 versions; micro-batches 0 and 1 were in flight: they read versions -2 and -1.
  const Schedule s = asynchronous(Updates::pipedream, 3, 3, {2, true});
  EXPECT_EQ(s.versions_at_start, (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(s.actions[0][0], (Action{Op::forward, 0, 0, -1, -2}));
  EXPECT_EQ(s.actions[0][1], (Action{Op::forward, 1, 0, -1, -1}));
  EXPECT_EQ(s.actions[0][2], (Action{Op::forward, 2, 0, -1, 0}));
  EXPECT_EQ(test::validation_error(lower(s)), "(valid)");
}

TEST(Asynchronous, StepSourceRepeatsTheTemplateStepShifted) {
  const Horizon h{4, 2};
  const int n = h.steps(), t = h.template_step();
  // A run no longer than the lists runs them as they are.
  for (int i = 0; i < n; ++i) EXPECT_EQ(step_source(n, t, n, i).step, i);
  // A longer one: the first steps, the template repeated, then the tail.
  const int run = n + 5;
  for (int i = 0; i < run; ++i) {
    const auto src = step_source(n, t, run, i);
    if (i < t) {
      EXPECT_EQ(src.step, i);
    } else if (i < t + 6) {
      EXPECT_EQ(src.step, t);
    }
    EXPECT_EQ(src.step + src.shift, i);
  }
  EXPECT_THROW(step_source(n, t, run, run), std::out_of_range);
}

// The template step, shifted by one step, is the next step of a longer horizon: so a long run repeating it
// runs what a validated run of that length would.
TEST(Asynchronous, TheTemplateStepShiftedIsTheNextStep) {
  for (Updates u : all_rules)
    for (int p : {1, 2, 4})
      for (int m : {1, 2, 4, 8}) {
        if (u == Updates::two_bw && m < p) continue;
        SCOPED_TRACE(fmt::format("{} p={} m={}", to_string(u), p, m));
        const Horizon h{p, m};
        const int t = h.template_step();
        const Schedule longer = lower(asynchronous(u, p, m, {h.steps() + 3, false}));
        for (int r = 0; r < p; ++r) {
          const auto ranges = step_ranges(longer.actions[r]);
          const auto [b0, e0] = ranges[t];
          for (int k = 1; k <= 3; ++k) {
            const auto [b, e] = ranges[t + k];
            ASSERT_EQ(e - b, e0 - b0) << "rank " << r << " step " << t + k;
            for (std::size_t i = 0; i < e0 - b0; ++i)
              EXPECT_EQ(shifted(longer.actions[r][b0 + i], longer, k, 0), longer.actions[r][b + i]);
          }
        }
      }
}

TEST(Asynchronous, SimulatorFindsNoBubbleInTheSteadyState) {
  Costs c;
  c.f = 1;
  c.b = 2;
  for (Updates u : all_rules)
    for (int p : {2, 4}) {
      const int m = 8;
      SCOPED_TRACE(fmt::format("{} p={}", to_string(u), p));
      const Schedule s = lower(asynchronous(u, p, m, {6, false}));
      const SimResult sim = simulate(s, c);
      EXPECT_NEAR(sim.steady_bubble, 0.0, 1e-12);
      EXPECT_EQ(int(sim.step_ends[0].size()), 6);
      // Each steady step takes m (f + b) on every rank.
      for (int r = 0; r < p; ++r)
        EXPECT_NEAR(sim.step_ends[r][sim.steady_last] - sim.step_ends[r][sim.steady_first - 1],
                    (sim.steady_last - sim.steady_first + 1) * m * 3.0, 1e-9);
      EXPECT_NEAR(sim.steady_step, m * 3.0, 1e-9);
      EXPECT_EQ(sim.versions_held, versions_held(s));
      // The flush-based 1F1B idles (p-1)/(m+p-1) of every step; its steady state is the step.
      const SimResult flushed = simulate(one_f_one_b(p, m), c);
      EXPECT_GT(flushed.bubble, 0.05);
      EXPECT_EQ(flushed.steady_step, flushed.makespan);
      EXPECT_NEAR(flushed.steady_bubble, flushed.bubble, 1e-12);
    }
}

}  // namespace
}  // namespace kpipe::schedule
