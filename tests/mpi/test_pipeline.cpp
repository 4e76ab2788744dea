// Schedule-independence (docs/architecture.md, property 1): every pipeline layout of the world reproduces, bit for
// bit, the losses and weights of one rank running the same micro-batches. The reference runs on
// MPI_COMM_SELF inside the same process, so every rank checks itself.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "kpipe/schedule/validate.hpp"

#include "support/mpi_world.hpp"
#include "support/training_run.hpp"

namespace kpipe {
namespace {

using test::world_size;

using test::expect_identical;
using test::train;
using test::TrainingRun;

// The small model for 3 steps.
Config small_config(int n_layers, int microbatches) { return test::small_config(n_layers, microbatches, 3); }

TEST(Pipeline, EveryScheduleMatchesOneRankBitForBit) {
  const int p = world_size();
  for (const std::string schedule : {"naive", "gpipe", "1f1b", "zb-h1"})
    for (int m : {1, 4, 8}) {
      Config c = small_config(2, m);
      c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
      const TrainingRun reference = train(c, MPI_COMM_SELF);
      c.pipeline.pipeline_size = p;
      expect_identical(train(c, MPI_COMM_WORLD), reference, schedule + " p=" + std::to_string(p) + " m=" + std::to_string(m));
    }
}

TEST(Pipeline, InterleavedMatchesOneRankBitForBit) {
  const int p = world_size();
  for (int m : {4, 8}) {
    Config c = small_config(6, m);
    const TrainingRun reference = train(c, MPI_COMM_SELF);
    c.pipeline.pipeline_size = p;
    c.pipeline.schedule = ScheduleKind::interleaved;
    c.pipeline.chunks = 2;
    expect_identical(train(c, MPI_COMM_WORLD), reference, "interleaved v=2 p=" + std::to_string(p) + " m=" + std::to_string(m));
  }
}

// ZB-V: two chunks per rank in a V, split backwards.
TEST(Pipeline, ZeroBubbleVMatchesOneRankBitForBit) {
  const int p = world_size();
  for (int m : {1, 4, 8}) {
    Config c = small_config(6, m);
    const TrainingRun reference = train(c, MPI_COMM_SELF);
    c.pipeline.pipeline_size = p;
    c.pipeline.schedule = ScheduleKind::zb_v;
    c.pipeline.chunks = 2;
    expect_identical(train(c, MPI_COMM_WORLD), reference, "zb-v p=" + std::to_string(p) + " m=" + std::to_string(m));
  }
}

// Recomputation changes what is kept, not a bit of the result: every schedule, every mode, against one rank
// that keeps everything.
TEST(Pipeline, RecomputationMatchesOneRankBitForBit) {
  const int p = world_size();
  const TrainingRun reference = train(small_config(6, 4), MPI_COMM_SELF);
  for (const std::string schedule : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"})
    for (const std::string mode : {"attention", "mlp", "block"}) {
      if (mode != "block" && schedule != "zb-h1" && schedule != "1f1b") continue;  // every mode on two, block on all
      Config c = small_config(6, 4);
      c.pipeline.pipeline_size = p;
      c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
      c.pipeline.chunks = schedule == "interleaved" || schedule == "zb-v" ? 2 : 1;
      c.memory.recompute = enum_value<Recompute>(mode);
      expect_identical(train(c, MPI_COMM_WORLD), reference, schedule + " recompute=" + mode + " p=" + std::to_string(p));
    }
}

// Mixed precision: the rounding points are part of what every layer computes, not of the layout, so bf16 runs
// reproduce one rank's bf16 run bit for bit on every schedule, replicas and recomputation included.
TEST(Pipeline, Bf16MatchesOneRankBitForBit) {
  const int p = world_size();
  Config c = small_config(6, 4);
  c.train.precision = Precision::bf16;
  const TrainingRun reference = test::train<bf16>(c, MPI_COMM_SELF);
  const TrainingRun fp32 = train(small_config(6, 4), MPI_COMM_SELF);
  EXPECT_NE(reference.checksum, fp32.checksum) << "bf16 rounds: its weights differ from fp32's";
  EXPECT_NEAR(reference.losses.back(), fp32.losses.back(), 0.02 * fp32.losses.back());
  for (const std::string schedule : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}) {
    Config layout = c;
    layout.pipeline.pipeline_size = p;
    layout.pipeline.schedule = enum_value<ScheduleKind>(schedule);
    layout.pipeline.chunks = schedule == "interleaved" || schedule == "zb-v" ? 2 : 1;
    expect_identical(test::train<bf16>(layout, MPI_COMM_WORLD), reference, "bf16 " + schedule + " p=" + std::to_string(p));
  }
  if (p % 2 == 0) {  // replicas, the ordered reduction
    Config replicas = c;
    replicas.pipeline.pipeline_size = p / 2;
    replicas.pipeline.data_parallel = 2;
    expect_identical(test::train<bf16>(replicas, MPI_COMM_WORLD), reference, "bf16 1f1b 2 replicas");
  }
  Config recomputed = c;
  recomputed.pipeline.pipeline_size = p;
  recomputed.memory.recompute = Recompute::block;
  expect_identical(test::train<bf16>(recomputed, MPI_COMM_WORLD), reference, "bf16 1f1b recompute=block");
}

TEST(Pipeline, BalancedPartitionMatchesOneRankBitForBit) {
  const int p = world_size();
  Config c = small_config(4, 4);
  const TrainingRun reference = train(c, MPI_COMM_SELF);
  c.pipeline.pipeline_size = p;
  c.pipeline.partition = PartitionKind::balanced;
  expect_identical(train(c, MPI_COMM_WORLD), reference, "balanced p=" + std::to_string(p));
}

TEST(Pipeline, MeasuredPeakStashEqualsTheValidatorsCount) {
  const int p = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"}) {
    Config c = small_config(2, 8);
    c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
    c.pipeline.pipeline_size = p;
    const TrainingRun run = train(c, MPI_COMM_WORLD);
    EXPECT_EQ(run.peak_stash, run.predicted_stash.at(rank)) << schedule << " rank " << rank;
    if (schedule == "gpipe") {
      EXPECT_EQ(run.peak_stash, 8);
    } else if (schedule == "1f1b") {
      EXPECT_EQ(run.peak_stash, std::min(p - rank, 8));
    }
  }
}

// The ordered reduction on every pipeline x replicas layout of the world (1 x 2, 2 x 2, 1 x 4), several
// schedules and reduction groups: one rank's bits, and each replica keeps its schedule's activation bound
// (the measured peak stash is the schedule's, e.g. 1F1B's min(p - s, m), not every micro-batch).
TEST(Pipeline, DataParallelOrderedReductionMatchesOneRankBitForBit) {
  const int n = world_size();
  if (n == 1) {
    // One rank cannot hold two replicas: the grid refuses, with the sizes named.
    EXPECT_THROW(comm::make_grid(MPI_COMM_WORLD, 1, 2), InputError);
    return;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int replicas = 2; replicas <= n; replicas *= 2) {
    const int p = n / replicas;
    Config one_rank = small_config(6, 4 * replicas);
    one_rank.train.batch = 8 * replicas;
    const TrainingRun reference = train(one_rank, MPI_COMM_SELF);  // the same for every layout below
    for (const std::string schedule : {"1f1b", "zb-h1", "gpipe", "interleaved", "zb-v"})
      for (int group : {1, 2}) {
        if ((schedule == "interleaved" || schedule == "zb-v") && group == 2) continue;
        Config c = one_rank;
        c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
        c.pipeline.chunks = schedule == "interleaved" || schedule == "zb-v" ? 2 : 1;
        c.pipeline.pipeline_size = p;
        c.pipeline.data_parallel = replicas;
        c.pipeline.dp_reduction_group = group;
        const std::string what = schedule + " " + std::to_string(p) + " pipeline x " + std::to_string(replicas) +
                                 " data-parallel, groups of " + std::to_string(group);
        const TrainingRun run = train(c, MPI_COMM_WORLD);
        expect_identical(run, reference, what);
        EXPECT_EQ(run.peak_stash, run.predicted_stash.at(rank % p)) << what;
        if (schedule == "1f1b") {
          EXPECT_EQ(run.peak_stash, std::min(p - rank % p, 4)) << what;
        }
      }
  }
}

TEST(Pipeline, DataParallelAllreduceTracksOneRankUpToRounding) {
  const int n = world_size();
  if (n == 1) {
    EXPECT_THROW(comm::make_grid(MPI_COMM_WORLD, 2, 1), InputError);
    return;
  }
  Config c = small_config(2, 4);
  const TrainingRun reference = train(c, MPI_COMM_SELF);
  c.pipeline.pipeline_size = n / 2;
  c.pipeline.data_parallel = 2;
  c.pipeline.dp_reduction = DpReduction::allreduce;
  const TrainingRun run = train(c, MPI_COMM_WORLD);
  // Replicas' sums are added in another association than one rank's running sum: equal up to rounding.
  for (std::size_t s = 0; s < reference.losses.size(); ++s)
    EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5 * std::abs(reference.losses[s])) << "step " << s;
  // Every replica holds the same weights: the XOR of an even number of equal checksums is zero.
  std::uint64_t checksum = run.checksum, combined = 0;
  MPI_Allreduce(&checksum, &combined, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
  EXPECT_EQ(combined, 0u);
}

TEST(Pipeline, BadLayoutsAreRejectedOnEveryRankBeforeWork) {
  const int n = world_size();
  // World size not a multiple of the pipeline size.
  EXPECT_THROW(comm::make_grid(MPI_COMM_WORLD, n + 1, 1), InputError);
  // More stages than layers: 2 blocks + embedding + head = 4 layers, 5 virtual stages.
  {
    Config c = small_config(2, 4);
    c.pipeline.pipeline_size = n;
    c.pipeline.schedule = ScheduleKind::interleaved;
    c.pipeline.chunks = 5;
    auto grid = comm::make_grid(MPI_COMM_WORLD, n, 1);
    EXPECT_THROW(runtime::Trainer<float>(c, test::corpus(), grid), InputError);
    comm::free_grid(grid);
  }
  // A micro-batch count the interleaved schedule cannot take (not a multiple of the pipeline size).
  if (n > 1) {
    Config c = small_config(6, 2 * n - 1);
    c.train.batch = 2 * n - 1;
    c.pipeline.pipeline_size = n;
    c.pipeline.schedule = ScheduleKind::interleaved;
    c.pipeline.chunks = 2;
    auto grid = comm::make_grid(MPI_COMM_WORLD, n, 1);
    EXPECT_THROW(runtime::Trainer<float>(c, test::corpus(), grid), InputError);
    comm::free_grid(grid);
  }
}

}  // namespace
}  // namespace kpipe
