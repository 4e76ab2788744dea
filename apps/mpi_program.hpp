#pragma once
// The frame of the programs that run on a pipeline of MPI ranks (kpipe-train, kpipe-eval, kpipe-generate):
// MPI; bad input as one line from rank 0 and exit 2 on every rank while every failure is still agreed by all
// ranks (before the run is set up), an abort of the whole job naming the rank after that or for any other
// error (no hang); a bounded MPI_Finalize. run_checkpoint_program adds what the programs that read a
// checkpoint share: the command line (help on rank 0, a parse error is bad input) and the GPU of the
// node-local rank with Kokkos.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/runtime/placement.hpp"

namespace kpipe::apps {

// What the frame gives a program and what the program tells the frame as it goes.
struct MpiProgram {
  int argc = 0;
  char** argv = nullptr;  // after MPI_Init took its own arguments
  int rank = 0, world_size = 1;
  // From here on an error may be one rank's alone: the frame aborts the job instead of reporting it once.
  bool set_up = false;
  double finalize_timeout_s = PipelineConfig{}.recv_timeout_s;  // how long MPI_Finalize may wait for every rank
};

// Runs run(MpiProgram&), which returns the exit code, inside MPI started at `thread_level` (what the library
// provides may be less: MPI_Query_thread says); `name` prefixes the error lines.
template <class Run>
int run_mpi_program(const std::string& name, int argc, char** argv, const Run& run,
                    int thread_level = MPI_THREAD_SINGLE) {
  // A rank on another node that dies closes its sockets: MPI's next write to one must fail (Open MPI then names
  // the peer's host, and kpipe's bounded wait the rank), not kill this rank with SIGPIPE and no word.
  std::signal(SIGPIPE, SIG_IGN);
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, thread_level, &provided);
  MpiProgram program;
  program.argc = argc;
  program.argv = argv;
  MPI_Comm_rank(MPI_COMM_WORLD, &program.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &program.world_size);
  int rc = 0;
  try {
    rc = run(program);
  } catch (const InputError& e) {
    if (program.set_up)
      abort_job(ExitCode::bad_input, fmt::format("{}: rank {}: error: {}", name, program.rank, e.what()));
    if (program.rank == 0) fmt::print(stderr, "{}: error: {}\n", name, e.what());
    rc = exit_status(ExitCode::bad_input);
  } catch (const std::exception& e) {
    abort_job(ExitCode::failure, fmt::format("{}: rank {}: error: {}", name, program.rank, e.what()));
  }
  {
    // MPI_Finalize waits for every rank: bounded like every other wait.
    const comm::Watchdog watch(program.rank, {program.finalize_timeout_s, "MPI_Finalize"});
    MPI_Finalize();
  }
  return rc;
}

// Parses the program's command line with `app`: false when it asked for --help (printed on rank 0), which ends the
// program; a parse error is bad input.
inline bool parse_options(CLI::App& app, const MpiProgram& program) {
  try {
    app.parse(program.argc, program.argv);
  } catch (const CLI::Success&) {
    if (program.rank == 0) std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::ParseError& e) {
    throw InputError(e.what());
  }
  return true;
}

// The frame of kpipe-eval and kpipe-generate: run(transport, rank, world_size) does the program's work once
// `app` has parsed the command line and Kokkos runs on the rank's device.
template <class Run> int run_checkpoint_program(int argc, char** argv, CLI::App& app, const Run& run) {
  return run_mpi_program(app.get_name(), argc, argv, [&](MpiProgram& program) {
    if (!parse_options(app, program)) return 0;
    // Each rank drives the GPU of its node-local rank (host threads: OMP_NUM_THREADS).
    const auto placement = runtime::place_rank(PipelineConfig(), MPI_COMM_WORLD);
    runtime::KokkosSession kokkos(placement);
    return run(placement.transport, program.rank, program.world_size);
  });
}

}  // namespace kpipe::apps
