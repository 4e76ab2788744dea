// The asynchronous rules' pure parts: how stale each update's gradient is (against the version rule), the
// update that extrapolates the first moment that many updates on, and the lr schedule a delay calls for,
// which keeps what the user gave.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "kpipe/core/config_io.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/model/parameters.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/runtime/async_rules.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "support/tiny_config.hpp"

namespace kpipe {
namespace {

Config async_config(ScheduleKind schedule, int stages, int vertical_sync = 0) {
  Config c = preset("small");
  c.pipeline.schedule = schedule;
  c.pipeline.pipeline_size = stages;
  c.pipeline.vertical_sync = vertical_sync;
  c.train.microbatches = 4;
  return c;
}

TEST(AsyncRules, DelayCountsTheUpdatesBetweenTheVersionReadAndTheNewest) {
  const int m = 4;
  for (const auto& [schedule, vertical] : {std::pair{ScheduleKind::pipedream, 0}, std::pair{ScheduleKind::pipedream, 1},
                                           std::pair{ScheduleKind::two_bw, 0}})
    for (int p : {1, 2, 4}) {
      const auto rules = runtime::AsyncRules::of(async_config(schedule, p, vertical));
      for (int s = 0; s < p; ++s)
        for (int u = 0; u < 20; ++u) {
          // Update u applies the gradients of pipedream's micro-batch u, of 2bw's window u (micro-batches
          // u m .. u m + m - 1, the first reading the oldest version), to the newest version, u.
          const int k = rules.per_microbatch() ? u : u * m;
          const int read = schedule::rule_version(rules.updates, p, m, s, k, false);
          EXPECT_EQ(rules.delay(s, u), u - read) << to_string(schedule) << vertical << " p " << p << " s " << s << " u " << u;
          if (rules.per_microbatch()) {
            EXPECT_EQ(rules.lookahead(s, u), rules.delay(s, u));
          }
        }
    }
  // The values the docs give: pipedream p - 1 - s, vertical sync p - 1, once the pipeline is full; 2bw's first
  // p - 1 micro-batches of a window 1, the rest 0, and a look-ahead of twice their mean, 2 (p - 1) / m.
  EXPECT_EQ(runtime::AsyncRules::of(async_config(ScheduleKind::pipedream, 4)).delay(0, 10), 3);
  EXPECT_EQ(runtime::AsyncRules::of(async_config(ScheduleKind::pipedream, 4)).delay(3, 10), 0);
  EXPECT_EQ(runtime::AsyncRules::of(async_config(ScheduleKind::pipedream, 4, 1)).delay(3, 10), 3);
  const auto two_stages = runtime::AsyncRules::of(async_config(ScheduleKind::two_bw, 2));
  EXPECT_EQ(two_stages.delay(1, 10), 1);
  EXPECT_EQ(two_stages.mean_delay(1, 10), 0.25);
  EXPECT_EQ(two_stages.lookahead(0, 10), 0.5);
  EXPECT_EQ(two_stages.lookahead(0, 0), 0.0);  // window 0 reads version 0, the newest
  EXPECT_EQ(runtime::AsyncRules::of(async_config(ScheduleKind::two_bw, 4)).lookahead(2, 10), 1.5);
  EXPECT_EQ(runtime::AsyncRules::of(async_config(ScheduleKind::two_bw, 1)).lookahead(0, 10), 0.0);  // plain training
}

// apply_async_update is a clipped AdamW step with the update's look-ahead: 2bw's first update (delay 0) is the
// plain step, the next ones on 2 stages and 4 micro-batches extrapolate the moment half an update on. The same
// bits in place and from another buffer (the newest version's) into the store's values, whatever these held.
TEST(AsyncRules, UpdateLooksAheadByItsLookAhead) {
  Config c = test::tiny_config(4);
  c.pipeline.schedule = ScheduleKind::two_bw;
  c.pipeline.pipeline_size = 2;
  c.train.microbatches = 4;
  c.optim.grad_clip = 0.5;
  const auto rules = runtime::AsyncRules::of(c);
  const auto desc = model::describe(c.model);
  ExecSpace space;
  model::ParameterStore<double> store(desc, 0, 1), apart(desc, 0, 1), expected(desc, 0, 1);
  for (auto* p : {&store, &apart, &expected}) p->initialize(space, 7);
  const View1<double> newest("newest", apart.size());
  for (int u = 0; u < 3; ++u) {
    for (auto* p : {&store, &apart, &expected}) Kokkos::deep_copy(p->grads(), 0.01 * (u + 1));
    const double squares = runtime::apply_async_update(space, c.optim, rules, 0, u, store, store.values());
    Kokkos::deep_copy(newest, apart.values());
    Kokkos::deep_copy(apart.values(), std::nan(""));  // an older version's weights: overwritten, never read
    EXPECT_EQ(runtime::apply_async_update(space, c.optim, rules, 0, u, apart, newest), squares);
    const double scale = nn::clip_factor(std::sqrt(squares), c.optim.grad_clip);
    nn::adamw_update(space, c.optim, rules.learning_rate(c.optim, u), u + 1, scale, expected.values(), expected.grads(),
                     expected.moment1(), expected.moment2(), expected.decay_mask(), u == 0 ? 0.0 : 0.5);
    expected.zero_grads(space);
    auto b = Kokkos::create_mirror_view_and_copy(HostSpace(), expected.values());
    for (auto* p : {&store, &apart}) {
      auto a = Kokkos::create_mirror_view_and_copy(HostSpace(), p->values());
      auto g = Kokkos::create_mirror_view_and_copy(HostSpace(), p->grads());
      const char* what = p == &store ? "in place" : "apart";
      for (std::int64_t i = 0; i < p->size(); ++i) {
        ASSERT_EQ(a(i), b(i)) << what << " update " << u << " element " << i;
        ASSERT_EQ(g(i), 0.0) << what << ": the gradients are zeroed";
      }
    }
  }
}

TEST(AsyncRules, LargestDelayIsTheStalestStages) {
  EXPECT_EQ(runtime::largest_delay(async_config(ScheduleKind::one_f_one_b, 4).pipeline), 0);
  EXPECT_EQ(runtime::largest_delay(async_config(ScheduleKind::pipedream, 1).pipeline), 0);  // plain training
  EXPECT_EQ(runtime::largest_delay(async_config(ScheduleKind::pipedream, 2).pipeline), 1);
  EXPECT_EQ(runtime::largest_delay(async_config(ScheduleKind::pipedream, 4).pipeline), 3);
  EXPECT_EQ(runtime::largest_delay(async_config(ScheduleKind::pipedream, 4, 1).pipeline), 3);
  EXPECT_EQ(runtime::largest_delay(async_config(ScheduleKind::two_bw, 1).pipeline), 0);  // plain training
  EXPECT_EQ(runtime::largest_delay(async_config(ScheduleKind::two_bw, 4).pipeline), 1);
}

TEST(AsyncRules, StableScheduleDividesThePeakAndLengthensTheWarmUpBySqrtOfOnePlusTheDelay) {
  const OptimizerConfig small = preset("small").optim;  // lr 2e-3, 20 warm-up steps, min_lr 1e-4
  const OptimizerConfig one = runtime::stable_schedule(small, 1);
  EXPECT_DOUBLE_EQ(one.lr, 2e-3 / std::sqrt(2.0));
  EXPECT_EQ(one.warmup_steps, 28);  // 20 sqrt(2) = 28.3
  EXPECT_EQ(one.min_lr, 1e-4);
  const OptimizerConfig three = runtime::stable_schedule(small, 3);
  EXPECT_DOUBLE_EQ(three.lr, 1e-3);
  EXPECT_EQ(three.warmup_steps, 40);
  const OptimizerConfig none = runtime::stable_schedule(small, 0);
  EXPECT_EQ(none.lr, small.lr);
  EXPECT_EQ(none.warmup_steps, small.warmup_steps);
  OptimizerConfig high_floor = small;
  high_floor.min_lr = 1.9e-3;  // never above the peak
  EXPECT_EQ(runtime::stable_schedule(high_floor, 1).min_lr, 2e-3 / std::sqrt(2.0));
  EXPECT_EQ(runtime::stable_schedule(small, 1).beta1, small.beta1);  // the rest as it was
}

TEST(AsyncRules, ChooseOptimizerDerivesWhatTheUserLeftAndKeepsWhatTheyGave) {
  const OptimizerConfig small = preset("small").optim;
  const auto choose = [&](const Config& c, const std::vector<std::string>& given) {
    return runtime::choose_optimizer(c, small, given);
  };
  // Synchronous, and pipedream or 2bw on one stage (plain training): as configured, nothing to say.
  for (const Config& c : {async_config(ScheduleKind::one_f_one_b, 2), async_config(ScheduleKind::pipedream, 1),
                          async_config(ScheduleKind::two_bw, 1)}) {
    const auto choice = choose(c, {});
    EXPECT_EQ(choice.optim.lr, 2e-3);
    EXPECT_EQ(choice.optim.warmup_steps, 20);
    EXPECT_TRUE(choice.note.empty()) << choice.note;
  }
  // 2bw keeps the preset's lr; its note says how many micro-batches read the old weights, and what it cost.
  for (int p : {2, 4}) {
    const auto choice = choose(async_config(ScheduleKind::two_bw, p), {});
    EXPECT_EQ(choice.optim.lr, 2e-3);
    EXPECT_EQ(choice.optim.warmup_steps, 20);
    EXPECT_NE(choice.note.find(fmt::format("{} of the 4 micro-batches", p - 1)), std::string::npos) << choice.note;
    EXPECT_NE(choice.note.find(fmt::format("looks ahead by {}", 0.5 * (p - 1))), std::string::npos) << choice.note;
    EXPECT_EQ(choice.note.find('\n'), std::string::npos);  // one line
    // 3 of 4 is the regime the look-ahead does not fix: the note says so, and how many micro-batches would.
    EXPECT_EQ(choice.note.find("more than a quarter trains worse") != std::string::npos, p == 4) << choice.note;
    if (p == 4) {
      EXPECT_NE(choice.note.find("train.microbatches >= 12"), std::string::npos) << choice.note;
    }
  }
  // pipedream on 2 stages with the preset's schedule: the stable one, said in a note.
  const Config delayed = async_config(ScheduleKind::pipedream, 2);
  auto choice = choose(delayed, {});
  EXPECT_DOUBLE_EQ(choice.optim.lr, 2e-3 / std::sqrt(2.0));
  EXPECT_EQ(choice.optim.warmup_steps, 28);
  EXPECT_EQ(choice.optim.min_lr, 1e-4);
  EXPECT_NE(choice.note.find("optim.lr = 0.00141"), std::string::npos) << choice.note;
  // pipedream on 4 stages: stage 0's delay of 3.
  choice = choose(async_config(ScheduleKind::pipedream, 4), {});
  EXPECT_DOUBLE_EQ(choice.optim.lr, 1e-3);
  EXPECT_EQ(choice.optim.warmup_steps, 40);
  // An lr given wins, the schedule with it; above the stable one it is noted.
  Config given_lr = delayed;
  given_lr.optim.lr = 2e-3;
  choice = choose(given_lr, {"optim.lr"});
  EXPECT_EQ(choice.optim.lr, 2e-3);
  EXPECT_EQ(choice.optim.warmup_steps, 20);
  EXPECT_NE(choice.note.find("optim.lr = 0.002 is above 0.00141"), std::string::npos) << choice.note;
  EXPECT_EQ(choice.note.find('\n'), std::string::npos);  // one line
  given_lr.optim.lr = 1e-3;  // below: nothing to say
  choice = choose(given_lr, {"optim.lr"});
  EXPECT_EQ(choice.optim.lr, 1e-3);
  EXPECT_TRUE(choice.note.empty()) << choice.note;
  // A warm-up or a floor given stays; the peak is still derived.
  Config given_warmup = delayed;
  given_warmup.optim.warmup_steps = 5;
  given_warmup.optim.min_lr = 1.9e-3;
  choice = choose(given_warmup, {"optim.warmup_steps", "optim.min_lr"});
  EXPECT_DOUBLE_EQ(choice.optim.lr, 2e-3 / std::sqrt(2.0));
  EXPECT_EQ(choice.optim.warmup_steps, 5);
  EXPECT_EQ(choice.optim.min_lr, 1.9e-3);  // validate() then names it: above the peak
  // A floor left to kpipe stays at most the peak.
  Config high_floor = delayed;
  high_floor.optim.min_lr = 1.9e-3;
  EXPECT_DOUBLE_EQ(choose(high_floor, {}).optim.min_lr, 2e-3 / std::sqrt(2.0));
  // Resolved into the configuration: a run of the chosen values, given back (the checkpoint's or metrics'
  // dump as --config), is the same run, with nothing to say.
  Config again = delayed;
  again.optim = choose(delayed, {}).optim;
  const auto repeated = choose(again, {"optim.lr", "optim.warmup_steps", "optim.min_lr"});
  EXPECT_EQ(repeated.optim.lr, again.optim.lr);
  EXPECT_EQ(repeated.optim.warmup_steps, again.optim.warmup_steps);
  EXPECT_TRUE(repeated.note.empty()) << repeated.note;
}

}  // namespace
}  // namespace kpipe
