// The single-process reference of the asynchronous schedules: with one stage pipedream is plain training
// with one micro-batch per step and 2bw plain training, bit for bit; the versions it reads and holds are the
// rule's; 2bw's stale reads and vertical sync change what is computed (so the tests above could fail).
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <mpi.h>

#include "kpipe/comm/grid.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/async_reference.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "support/corpus.hpp"
#include "support/tiny_config.hpp"

namespace kpipe {
namespace {

Config async_config(const std::string& schedule, int stages, int microbatches, int steps) {
  Config c = test::tiny_config(steps);
  c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
  c.pipeline.pipeline_size = stages;
  c.train.microbatches = microbatches;
  c.train.batch = microbatches * 2;
  c.optim.warmup_steps = 2;
  c.optim.grad_clip = 0.5;  // binding: clipping is part of what must agree
  return c;
}

TEST(AsyncReference, OneStagePipeDreamIsPlainTrainingWithOneMicroBatchPerStep) {
  const int m = 3, steps = 3;
  const Config a = async_config("pipedream", 1, m, steps);
  runtime::AsyncReference<float> reference(a, test::corpus());
  std::vector<double> async_losses;
  for (int t = 0; t < steps; ++t) {
    const auto r = reference.step();
    async_losses.insert(async_losses.end(), r.microbatch_losses.begin(), r.microbatch_losses.end());
  }
  // Plain: batch = one micro-batch, m times as many steps, the lr schedule's steps scaled alike.
  Config plain = a;
  plain.pipeline.schedule = ScheduleKind::one_f_one_b;
  plain.train.batch = 2;
  plain.train.microbatches = 1;
  plain.train.steps = steps * m;
  plain.optim.warmup_steps = a.optim.warmup_steps * m;
  auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
  {
    runtime::Trainer<float> trainer(plain, test::corpus(), grid);
    for (int k = 0; k < steps * m; ++k) EXPECT_EQ(trainer.step().loss, async_losses[k]) << "micro-batch " << k;
    EXPECT_EQ(trainer.param_checksum(), reference.param_checksum());
  }
  comm::free_grid(grid);
}

TEST(AsyncReference, OneStageTwoBWIsPlainTraining) {
  // No micro-batch is forwarded across a window's boundary: every one reads the newest version, and the update
  // has nothing to look ahead for.
  const int m = 3, steps = 3;
  const Config a = async_config("2bw", 1, m, steps);
  runtime::AsyncReference<float> reference(a, test::corpus());
  Config plain = a;
  plain.pipeline.schedule = ScheduleKind::one_f_one_b;
  auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
  {
    runtime::Trainer<float> trainer(plain, test::corpus(), grid);
    for (int t = 0; t < steps; ++t) EXPECT_EQ(trainer.step().loss, reference.step().loss) << "step " << t;
    EXPECT_EQ(trainer.param_checksum(), reference.param_checksum());
  }
  comm::free_grid(grid);
}

TEST(AsyncReference, ReadsTheRulesVersionsAndHoldsTheTheorysCount) {
  for (const auto& [name, vertical] : {std::pair{"pipedream", 0}, std::pair{"pipedream", 1}, std::pair{"2bw", 0}}) {
    Config c = async_config(name, 4, 4, 3);
    c.model.n_layers = 2;  // 4 layers: embedding, 2 blocks, head
    c.pipeline.vertical_sync = vertical;
    SCOPED_TRACE(fmt::format("{} vertical_sync={}", name, vertical));
    runtime::AsyncReference<float> reference(c, test::corpus());
    for (int t = 0; t < 3; ++t) reference.step();
    const auto updates = schedule::updates_of(enum_value<ScheduleKind>(name), vertical == 1);
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(reference.peak_versions(s), schedule::versions_bound(updates, 4, s)) << "stage " << s;
      for (int k = 0; k < 12; ++k)
        EXPECT_EQ(reference.versions_read()[k][s], schedule::rule_version(updates, 4, 4, s, k, false));
    }
  }
}

TEST(AsyncReference, StalenessChangesTheResult) {
  // 2bw's stale reads on two stages are not one stage's plain training; with four, pipedream's stashed reads
  // and vertical sync's differ too. (Otherwise the bit-identity tests could not tell the rules apart.)
  auto checksum = [](const std::string& name, int stages, int vertical) {
    Config c = async_config(name, stages, 4, 2);
    c.pipeline.vertical_sync = vertical;
    runtime::AsyncReference<float> reference(c, test::corpus());
    reference.step();
    reference.step();
    return reference.param_checksum();
  };
  EXPECT_NE(checksum("2bw", 2, 0), checksum("2bw", 1, 0));
  EXPECT_NE(checksum("pipedream", 4, 0), checksum("pipedream", 4, 1));
  EXPECT_NE(checksum("pipedream", 4, 0), checksum("pipedream", 1, 0));
}

}  // namespace
}  // namespace kpipe
