// Asynchronous schedules (PipeDream, vertical sync, PipeDream-2BW) on the world's ranks as one pipeline
// reproduce, bit for bit, the single-process reference of their semantics (runtime/async_reference.hpp):
// every step's loss and the final weights. Every backward reads its forward's version, and the versions each
// rank holds are what the validator counts from the lists, and the theory (p - s, p, 2).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/async_reference.hpp"
#include "kpipe/runtime/placement.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/versions.hpp"

#include "support/async_config.hpp"
#include "support/corpus.hpp"
#include "support/mpi_world.hpp"

namespace kpipe {
namespace {

using test::async_config;
using test::world_size;

struct Case {
  const char* schedule;
  int vertical_sync;
  int microbatches;
  int extra_steps = 2;  // beyond the lists' horizon (negative: a run shorter than it)
};

// Over MPI, and over MPI with NCCL's semantics (comm/stream_ordered_mpi.hpp): the path a GPU node runs, the
// lists after the plan's stream-order pass.
TEST(Asynchronous, EveryRuleReproducesTheReferenceBitForBit) {
  const int p = world_size();
  for (const auto transport : {comm::TransportKind::mpi, comm::TransportKind::mpi_stream_ordered})
  for (const Case& k : {Case{"pipedream", 0, 2}, Case{"pipedream", 0, 4}, Case{"pipedream", 1, 4}, Case{"2bw", 0, 4},
                        Case{"pipedream", 0, 1, -3}, Case{"2bw", 0, 4, -3}}) {
    if (std::string(k.schedule) == "2bw" && k.microbatches < p) continue;
    const auto updates = schedule::updates_of(enum_value<ScheduleKind>(k.schedule), k.vertical_sync == 1);
    // Past the validated lists' horizon, so that the repeated middle step runs too; or shorter than it.
    const int steps = schedule::Horizon{p, k.microbatches}.steps() + k.extra_steps;
    const Config c = async_config(k.schedule, k.vertical_sync, p, k.microbatches, steps);
    SCOPED_TRACE(fmt::format("{} vertical_sync={} p={} m={} steps={} over {}", k.schedule, k.vertical_sync, p,
                             k.microbatches, steps, transport));
    runtime::AsyncReference<float> reference(c, test::corpus());
    auto grid = comm::make_grid(MPI_COMM_WORLD, p, 1);
    {
      runtime::TrainerOptions options;
      options.transport = transport;
      runtime::Trainer<float> trainer(c, test::corpus(), grid, options);
      for (int t = 0; t < steps; ++t) {
        const auto got = trainer.step();
        const auto want = reference.step();
        EXPECT_EQ(got.loss, want.loss) << "step " << t;
        EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-12 * want.grad_norm) << "step " << t;
      }
      EXPECT_EQ(trainer.param_checksum(), reference.param_checksum());
      // Weight stashing: each backward read its forward's version, the rule's.
      const auto& read = trainer.versions_read();
      EXPECT_EQ(int(read.size()), steps * k.microbatches);
      for (const auto& r : read) {
        EXPECT_EQ(r.backward, r.forward) << "micro-batch " << r.microbatch;
        EXPECT_EQ(r.forward, schedule::rule_version(updates, p, k.microbatches, grid.stage, int(r.microbatch), false));
      }
      // Versions held: measured = the validator's count from the lists = the theory.
      const int predicted = schedule::versions_held(trainer.plan().lists())[grid.stage];
      EXPECT_EQ(trainer.stage().versions(0).peak(), predicted);
      if (k.extra_steps >= 0) {
        EXPECT_EQ(predicted, schedule::versions_bound(updates, p, grid.stage));
      }
      // Evaluation after the run sees the newest weights, as the reference's checksum does.
      EXPECT_TRUE(std::isfinite(trainer.evaluate()));
    }
    comm::free_grid(grid);
  }
}

// An asynchronous step's report (its loss, the update norm, the stop votes) completes during the next step, so
// that no rank waits at the step boundary; a synchronous step's at once. Either way every step is reported once,
// in order, with the same figures as one step at a time, and a stop signal on one rank reaches every rank with
// the report of the step whose lists it ended.
TEST(Asynchronous, ReportsTrailTheirStepAndLoseNothing) {
  const int p = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const char* schedule : {"1f1b", "pipedream", "2bw"}) {
    const int m = std::max(4, p), steps = schedule::Horizon{p, m}.steps() + 2, signalled = 2;
    const Config c = async_config(schedule, 0, p, m, steps);
    const int lag = std::string(schedule) != "1f1b" ? 1 : 0;  // steps a report trails its step by
    SCOPED_TRACE(fmt::format("{} p={} m={} steps={}", schedule, p, m, steps));
    auto grid = comm::make_grid(MPI_COMM_WORLD, p, 1);
    std::vector<runtime::StepStats> one_at_a_time, reported;
    std::uint64_t checksum = 0;
    {
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
      for (int t = 0; t < steps; ++t) one_at_a_time.push_back(trainer.step());
      checksum = trainer.param_checksum();
    }
    {
      // The last rank gets SIGUSR1 as step `signalled`'s lists end (the trainer reads it once per step).
      int reads = 0;
      runtime::TrainerOptions options;
      options.stop_signal = [&] { return rank == p - 1 && reads++ == signalled ? SIGUSR1 : 0; };
      runtime::Trainer<float> trainer(c, test::corpus(), grid, options);
      for (int t = 0; t < steps; ++t) {
        trainer.run_step();
        const auto reports = trainer.take_reports();
        ASSERT_EQ(reports.size(), t >= lag ? 1u : 0u) << "step " << t;
        if (!reports.empty()) {
          EXPECT_EQ(reports[0].step, t - lag);
        }
        reported.insert(reported.end(), reports.begin(), reports.end());
      }
      trainer.settle();
      const auto last = trainer.take_reports();
      reported.insert(reported.end(), last.begin(), last.end());
      EXPECT_TRUE(trainer.take_reports().empty());
      EXPECT_EQ(trainer.param_checksum(), checksum);
    }
    ASSERT_EQ(reported.size(), one_at_a_time.size());
    for (int t = 0; t < steps; ++t) {
      EXPECT_EQ(reported[t].step, t);
      EXPECT_EQ(reported[t].loss, one_at_a_time[t].loss) << "step " << t;
      EXPECT_EQ(reported[t].grad_norm, one_at_a_time[t].grad_norm) << "step " << t;
      EXPECT_EQ(reported[t].lr, one_at_a_time[t].lr) << "step " << t;
      EXPECT_EQ(reported[t].stop_signal, t == signalled ? SIGUSR1 : 0) << "step " << t;
      EXPECT_EQ(one_at_a_time[t].stop_signal, 0);
    }
    comm::free_grid(grid);
  }
}

// Mixed precision: every rule, in bf16, reproduces the reference's bf16 run bit for bit (the reference rounds
// where the runtime does: the layers' own rounding points, the compute copy refreshed at every bind and update).
TEST(Asynchronous, Bf16RulesReproduceTheReferenceBitForBit) {
  const int p = world_size();
  for (const Case& k : {Case{"pipedream", 0, 4}, Case{"pipedream", 1, 4}, Case{"2bw", 0, 4}}) {
    const int steps = schedule::Horizon{p, k.microbatches}.steps() + k.extra_steps;
    Config c = async_config(k.schedule, k.vertical_sync, p, k.microbatches, steps);
    c.train.precision = Precision::bf16;
    SCOPED_TRACE(fmt::format("bf16 {} vertical_sync={} p={} m={} steps={}", k.schedule, k.vertical_sync, p,
                             k.microbatches, steps));
    runtime::AsyncReference<float, bf16> reference(c, test::corpus());
    auto grid = comm::make_grid(MPI_COMM_WORLD, p, 1);
    {
      runtime::Trainer<float, bf16> trainer(c, test::corpus(), grid);
      for (int t = 0; t < steps; ++t) {
        const auto got = trainer.step();
        const auto want = reference.step();
        EXPECT_EQ(got.loss, want.loss) << "step " << t;
      }
      EXPECT_EQ(trainer.param_checksum(), reference.param_checksum());
    }
    comm::free_grid(grid);
  }
}

// Data parallelism: the world's ranks as d replicas of a p-stage pipeline (every p x d = world, d > 1), each
// update applying the replicas' summed gradients. "ordered" sums in replica order and reproduces the
// reference bit for bit; "allreduce" leaves the order to MPI: exact for two replicas (a + b = b + a), within
// rounding for more.
TEST(Asynchronous, DataParallelLayoutsReproduceTheReference) {
  const int n = world_size();
  for (int d = 2; d <= n; d *= 2)
    for (const Case& k : {Case{"pipedream", 0, 2, -1}, Case{"pipedream", 1, 2}, Case{"2bw", 0, 4}})
      for (const std::string reduction : {"ordered", "allreduce", "ordered-stream"}) {
        // "ordered-stream": the ordered sums and the pipeline over MPI with NCCL's semantics.
        const auto transport =
            reduction == "ordered-stream" ? comm::TransportKind::mpi_stream_ordered : comm::TransportKind::mpi;
        const int p = n / d;
        const int local = std::max(k.microbatches, p);  // 2bw: m >= p per pipeline
        const int steps = schedule::Horizon{p, local}.steps() + k.extra_steps;
        Config c = async_config(k.schedule, k.vertical_sync, p, local * d, steps);
        c.pipeline.data_parallel = d;
        c.pipeline.dp_reduction = reduction == "allreduce" ? DpReduction::allreduce : DpReduction::ordered;
        SCOPED_TRACE(fmt::format("{} vertical_sync={} {}x{} {} m={} steps={}", k.schedule, k.vertical_sync, p, d,
                                 reduction, local * d, steps));
        const bool exact = reduction != "allreduce" || d == 2;
        runtime::AsyncReference<float> reference(c, test::corpus());
        auto grid = comm::make_grid(MPI_COMM_WORLD, p, d);
        {
          runtime::TrainerOptions options;
          options.transport = transport;
          runtime::Trainer<float> trainer(c, test::corpus(), grid, options);
          for (int t = 0; t < steps; ++t) {
            const auto got = trainer.step();
            const auto want = reference.step();
            if (exact) {
              EXPECT_EQ(got.loss, want.loss) << "step " << t;
            } else {
              EXPECT_NEAR(got.loss, want.loss, 1e-5 * want.loss) << "step " << t;
            }
            EXPECT_NEAR(got.grad_norm, want.grad_norm, (exact ? 1e-12 : 1e-4) * want.grad_norm) << "step " << t;
          }
          if (exact) {
            EXPECT_EQ(trainer.param_checksum(), reference.param_checksum());
          }
          for (const auto& r : trainer.versions_read()) EXPECT_EQ(r.backward, r.forward) << "micro-batch " << r.microbatch;
          EXPECT_EQ(trainer.stage().versions(0).peak(), schedule::versions_held(trainer.plan().lists())[grid.stage]);
          EXPECT_TRUE(std::isfinite(trainer.evaluate()));
        }
        comm::free_grid(grid);
      }
}

// pipeline.transport = "auto" resolves as for the synchronous schedules: NCCL on a build with it (and GPU
// buffers), MPI otherwise; an explicit choice stands.
TEST(Asynchronous, TransportResolvesAsForSynchronousSchedules) {
  for (const char* schedule : {"pipedream", "2bw"}) {
    Config c = async_config(schedule, 0, 1, 2, 1);
    Config synchronous = c;
    synchronous.pipeline.schedule = ScheduleKind::one_f_one_b;
    EXPECT_EQ(runtime::default_transport(c.pipeline), runtime::default_transport(synchronous.pipeline)) << schedule;
    c.pipeline.transport = TransportChoice::nccl;
    EXPECT_EQ(runtime::default_transport(c.pipeline), comm::TransportKind::nccl) << schedule;
    c.pipeline.transport = TransportChoice::mpi;
    EXPECT_EQ(runtime::default_transport(c.pipeline), comm::TransportKind::mpi) << schedule;
  }
}

TEST(Asynchronous, BadCombinationsExitWithOneLineNamingTheKey) {
  const int p = world_size();
  auto message = [&](const Config& c) {
    auto grid = comm::make_grid(MPI_COMM_WORLD, c.pipeline.pipeline_size, c.pipeline.data_parallel);
    std::string what = "(accepted)";
    try {
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
    } catch (const InputError& e) {
      what = e.what();
    }
    comm::free_grid(grid);
    return what;
  };
  if (p >= 2) {
    Config c = async_config("2bw", 0, p, 1, 2);
    c.train.batch = 2;
    EXPECT_EQ(message(c).rfind(fmt::format("train.microbatches = 1 per pipeline is below pipeline.pipeline_size = {}", p), 0),
              0u);
  }
  // Asynchronous runs are checkpointed (the versions in flight are saved: tests/e2e/checkpoint_async.sh).
  Config ckpt = async_config("pipedream", 0, p, 2, 2);
  ckpt.checkpoint.dir = "/tmp/kpipe-async-ckpt-never-written";
  EXPECT_EQ(message(ckpt), "(accepted)");
}

}  // namespace
}  // namespace kpipe
