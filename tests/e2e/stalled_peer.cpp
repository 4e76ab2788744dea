// A pipeline stage that stops answering, for tests/e2e/recv_timeout.sh: two ranks train the MPI tests' small
// model as a two-stage pipeline, and world rank 1's transport stalls for a minute at its first message of
// step 0. Its peer must give up after pipeline.recv_timeout_s = 1 and end the whole job
// (runtime/peer_lost.hpp); returning 0 means it did not.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <memory>

#include "kpipe/comm/grid.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "support/corpus.hpp"
#include "support/mpi_world.hpp"
#include "support/stalling_transport.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    using namespace kpipe;
    Config config = test::small_config(/*n_layers=*/2, /*microbatches=*/2, /*steps=*/2);
    config.pipeline.pipeline_size = 2;
    config.pipeline.recv_timeout_s = 1;
    auto grid = comm::make_grid(MPI_COMM_WORLD, config.pipeline.pipeline_size, config.pipeline.data_parallel);
    {
      runtime::TrainerOptions options;
      if (grid.world_rank == 1)
        options.wrap_transport = [](std::unique_ptr<comm::Transport> transport) -> std::unique_ptr<comm::Transport> {
          return std::make_unique<test::StallingTransport>(std::move(transport), 60.0);
        };
      runtime::Trainer<float> trainer(config, test::corpus(), grid, options);
      for (int s = 0; s < config.train.steps; ++s) trainer.step();
    }
    comm::free_grid(grid);
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
