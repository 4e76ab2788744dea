// The NCCL path without a GPU: the trainer over MPI with NCCL's semantics (comm/stream_ordered_mpi.hpp: no
// tags, sends that wait for their receives, groups completed before anything after them). It runs what a GPU
// node runs over NCCL: the schedule after order_for_streams(), messages posted exactly at their positions in
// groups, the ordered replica reduction as a chain of point-to-point transfers and a broadcast. Every layout
// must still reproduce one rank bit for bit; a wrong pass or proof would deadlock (a timeout) or hand one
// micro-batch's data to another (different bits).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/trainer.hpp"

#include "support/mpi_world.hpp"
#include "support/training_run.hpp"

namespace kpipe {
namespace {

using test::world_size;

using test::train;
using test::TrainingRun;

// The small model for 2 steps; a deadlock shows as a timeout, not a hung test.
Config bounded_config(int n_layers, int microbatches) {
  Config c = test::small_config(n_layers, microbatches, 2);
  c.pipeline.recv_timeout_s = 60;
  return c;
}

// The layout over MPI with NCCL's semantics, against one rank over plain MPI.
void expect_like_one_rank(Config c, int pipeline_size, int data_parallel, const std::string& what) {
  const TrainingRun reference = train(c, MPI_COMM_SELF);
  c.pipeline.pipeline_size = pipeline_size;
  c.pipeline.data_parallel = data_parallel;
  runtime::TrainerOptions options;
  options.transport = comm::TransportKind::mpi_stream_ordered;
  const TrainingRun run = train(c, MPI_COMM_WORLD, options);
  test::expect_identical(run, reference, what);
}

TEST(StreamOrderedTransport, EveryScheduleMatchesOneRankBitForBit) {
  const int p = world_size();
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"})
    for (int m : {1, 4}) {
      Config c = bounded_config(2, m);
      c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
      expect_like_one_rank(c, p, 1, schedule + " p=" + std::to_string(p) + " m=" + std::to_string(m));
    }
}

// Interleaved and GPipe with chunks send activations both ways between two ranks: the schedules that need
// the pass.
TEST(StreamOrderedTransport, ChunkedSchedulesMatchOneRankBitForBit) {
  const int p = world_size();
  Config c = bounded_config(6, 2 * p);
  c.pipeline.schedule = ScheduleKind::interleaved;
  c.pipeline.chunks = 2;
  expect_like_one_rank(c, p, 1, "interleaved v=2 p=" + std::to_string(p));
  c.pipeline.schedule = ScheduleKind::gpipe;
  expect_like_one_rank(c, p, 1, "gpipe v=2 p=" + std::to_string(p));
  c.pipeline.schedule = ScheduleKind::zb_v;
  expect_like_one_rank(c, p, 1, "zb-v p=" + std::to_string(p));
}

TEST(StreamOrderedTransport, OrderedReplicaReductionMatchesOneRankBitForBit) {
  const int n = world_size();
  if (n == 1) GTEST_SKIP() << "two replicas need two ranks";
  Config c = bounded_config(2, 4);
  c.pipeline.schedule = ScheduleKind::one_f_one_b;
  expect_like_one_rank(c, n / 2, 2, std::to_string(n / 2) + " pipeline x 2 data-parallel, ordered");
  // The running sums travel between the pipelines' messages (schedule/reduction.hpp), on the stream too.
  c.pipeline.dp_reduction_group = 2;
  expect_like_one_rank(c, n / 2, 2, std::to_string(n / 2) + " pipeline x 2 data-parallel, ordered, groups of 2");
  c.pipeline.dp_reduction_group = 1;
  c.pipeline.schedule = ScheduleKind::zb_h1;
  expect_like_one_rank(c, n / 2, 2, std::to_string(n / 2) + " pipeline x 2 data-parallel, ordered, zb-h1");
}

}  // namespace
}  // namespace kpipe
