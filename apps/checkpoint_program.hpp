#pragma once
// The frame of the programs that run a checkpoint on a pipeline of MPI ranks (kpipe-eval, kpipe-generate):
// MPI; the command line (help on rank 0, a parse error is bad input); the GPU of the node-local rank and
// Kokkos; bad input as one line from rank 0 and exit 2 on every rank; any other error aborts the job; a
// bounded MPI_Finalize. run(transport, rank, world_size) does the program's work and returns its exit code.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/runtime/placement.hpp"

namespace kpipe::apps {

template <class Run> int run_checkpoint_program(int argc, char** argv, CLI::App& app, const Run& run) {
  const std::string name = app.get_name();
  MPI_Init(&argc, &argv);
  int rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  int rc = 0;
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::Success&) {
      if (rank == 0) std::fputs(app.help().c_str(), stdout);
      throw;
    } catch (const CLI::ParseError& e) {
      throw InputError(e.what());
    }
    // Each rank drives the GPU of its node-local rank (host threads: OMP_NUM_THREADS).
    const auto placement = runtime::place_rank(PipelineConfig(), MPI_COMM_WORLD);
    runtime::KokkosSession kokkos(placement);
    rc = run(placement.transport, rank, world_size);
  } catch (const CLI::Success&) {
    rc = 0;
  } catch (const InputError& e) {
    if (rank == 0) fmt::print(stderr, "{}: error: {}\n", name, e.what());
    rc = exit_status(ExitCode::bad_input);
  } catch (const std::exception& e) {
    abort_job(ExitCode::failure, fmt::format("{}: rank {}: error: {}", name, rank, e.what()));
  }
  {
    // MPI_Finalize waits for every rank: bounded like every other wait.
    const comm::Watchdog watch(rank, {PipelineConfig{}.recv_timeout_s, "MPI_Finalize"});
    MPI_Finalize();
  }
  return rc;
}

}  // namespace kpipe::apps
