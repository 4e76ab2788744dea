// No allocation on the hot path: after the first step (the stash slots are allocated on first use), a
// training step allocates nothing through Kokkos, for every schedule. Counted through Kokkos Tools'
// allocation callback, not assumed. One rank (several chunks for interleaved) on MPI_COMM_SELF: with
// several ranks a slot whose last send has not completed yet is not reused, so the pool size there depends
// on timing (bounded by the stash plus the sends in flight) and is not asserted here.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <string>

#include "kpipe/comm/grid.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace kpipe {
namespace {

long allocations = 0;  // Kokkos Tools callbacks are plain function pointers: file-local test state
void count_allocation(const Kokkos_Profiling_SpaceHandle, const char*, const void*, const std::uint64_t) {
  ++allocations;
}

TEST(HotPath, StepsAfterTheFirstAllocateNothing) {
  const auto corpus = data::synthetic_corpus(9, 40000, 0.1);
  for (const std::string schedule : {"1f1b", "gpipe", "zb-h1", "interleaved"}) {
    Config c;
    c.model.seq_len = 16;
    c.model.d_model = 32;
    c.model.n_heads = 2;
    c.model.n_layers = 6;
    c.train.microbatches = 4;
    c.train.batch = 4;
    c.train.steps = 6;
    c.pipeline.schedule = schedule;
    c.pipeline.chunks = schedule == "interleaved" ? 2 : 1;
    auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
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

}  // namespace
}  // namespace kpipe
