// No allocation on the hot path: after the first step (the stash slots are allocated on first use), a
// training step allocates nothing through Kokkos, for every schedule, on every rank of a pipeline as deep
// as the world (1, 2, 4 ranks). Counted through Kokkos Tools' allocation callback, not assumed. With several
// ranks this holds because message buffers come back at points the schedule fixes (the delivery points of
// schedule/delivery.hpp), not when a send happens to complete, so oversubscribed ranks running at uneven
// speeds allocate no more in one step than in another.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <string>

#include "kpipe/comm/grid.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "kpipe/schedule/asynchronous.hpp"

#include "support/async_config.hpp"

namespace kpipe {
namespace {

long allocations = 0;  // Kokkos Tools callbacks are plain function pointers: file-local test state
void count_allocation(const Kokkos_Profiling_SpaceHandle, const char*, const void*, const std::uint64_t) {
  ++allocations;
}

TEST(HotPath, StepsAfterTheFirstAllocateNothing) {
  const auto corpus = data::synthetic_corpus(9, 40000, 0.1);
  for (const std::string schedule : {"1f1b", "gpipe", "zb-h1", "interleaved", "zb-v", "zb-h1+block"}) {
    Config c;
    c.model.seq_len = 16;
    c.model.d_model = 32;
    c.model.n_heads = 2;
    c.model.n_layers = 6;  // with embedding and head, 8 layers: 2 per virtual stage at 4 ranks x 2 chunks
    c.train.microbatches = 4;
    c.train.batch = 4;
    c.train.steps = 6;
    c.pipeline.schedule = enum_value<ScheduleKind>(schedule.substr(0, schedule.find('+')));
    c.pipeline.chunks = schedule == "interleaved" || schedule == "zb-v" ? 2 : 1;
    if (schedule.find('+') != std::string::npos) c.memory.recompute = enum_value<Recompute>(schedule.substr(schedule.find('+') + 1));
    int ranks = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    c.pipeline.pipeline_size = ranks;
    auto grid = comm::make_grid(MPI_COMM_WORLD, ranks, 1);
    {
      runtime::Trainer<float> trainer(c, corpus, grid);
      allocations = 0;
      Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
      trainer.step();
      const long first_step = allocations;
      allocations = 0;
      for (int s = 0; s < 4; ++s) trainer.step();
      Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
      EXPECT_GT(first_step, 0) << schedule << ": the counter sees the stash being allocated";
      EXPECT_EQ(allocations, 0) << schedule;
    }
    comm::free_grid(grid);
  }
}

// Asynchronous schedules: the weight versions' pool grows during the warm-up (the first steps, up to the
// lists' repeating step), then nothing is allocated per micro-batch; with replicas too (their sums at each
// update land in a buffer allocated once).
TEST(HotPath, AsynchronousStepsAfterTheWarmUpAllocateNothing) {
  const auto corpus = data::synthetic_corpus(9, 40000, 0.1);
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  for (int replicas = 1; replicas <= std::min(ranks, 2); ++replicas)
    for (const std::string schedule : {"pipedream", "vertical-sync", "2bw"}) {
      const int stages = ranks / replicas;
      Config c = test::async_config(schedule == "2bw" ? "2bw" : "pipedream", schedule == "vertical-sync" ? 1 : 0,
                                    stages, 4 * replicas, 12);
      c.pipeline.data_parallel = replicas;
      auto grid = comm::make_grid(MPI_COMM_WORLD, stages, replicas);
      {
        runtime::Trainer<float> trainer(c, corpus, grid);
        const int warm_up = schedule::Horizon{stages, 4}.template_step();
        for (int s = 0; s < warm_up; ++s) trainer.step();
        allocations = 0;
        Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
        for (int s = 0; s < 6; ++s) trainer.step();  // the repeated step, then the first of the drain
        Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
        EXPECT_EQ(allocations, 0) << schedule << " " << stages << "x" << replicas;
      }
      comm::free_grid(grid);
    }
}

}  // namespace
}  // namespace kpipe
