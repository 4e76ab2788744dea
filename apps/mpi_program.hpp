#pragma once
// The frame of the programs that run on a pipeline of MPI ranks (kpipe-train, kpipe-eval, kpipe-generate):
// program.hpp's one way to end, with ranks. A failure every rank agreed on (bad input before the run is set up,
// comm::agree's) is one line from rank 0 and its code on every rank; any other (one rank's, once the run is set
// up) is one line naming the rank and the end of the whole job (abort_job), never a hang. MPI_Finalize is
// bounded. run_checkpoint_program adds what the programs that read a checkpoint share: the command line (help
// on rank 0, a parse error is bad input) and the GPU of the node-local rank with Kokkos.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/runtime/placement.hpp"

#include "program.hpp"

namespace kpipe::apps {

// What the frame gives a program and what the program tells the frame as it goes.
struct MpiProgram {
  int argc = 0;
  char** argv = nullptr;  // after MPI_Init took its own arguments
  int rank = 0, world_size = 1;
  // From here on an error may be one rank's alone: the frame ends the job instead of reporting it once.
  bool set_up = false;
  double finalize_timeout_s = PipelineConfig{}.recv_timeout_s;  // how long MPI_Finalize may wait for every rank
};

// Whether every rank has the exception being handled: one comm::agree agreed on, or bad input before set-up.
inline bool agreed_by_every_rank(const MpiProgram& program) {
  try {
    throw;
  } catch (const comm::AgreedFailure&) {
    return true;
  } catch (const InputError&) {
    return !program.set_up;
  } catch (...) {
    return false;
  }
}

// Runs run(MpiProgram&), which returns the exit code, inside MPI started at `thread_level` (what the library
// provides may be less: MPI_Query_thread says); `name` prefixes the error lines.
template <class Run>
int run_mpi_program(ProgramName which, const std::string& name, int argc, char** argv, const Run& run,
                    int thread_level = MPI_THREAD_SINGLE) {
  start_program(which);  // before MPI_Init (h5/file.hpp says why)
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
  Ending ending;
  bool agreed = false;  // every rank has the same ending: rank 0 says it
  try {
    ending.code = ExitCode(run(program));
  } catch (...) {
    ending = ending_of_current_exception(failure_code(which));
    agreed = agreed_by_every_rank(program);
    if (!agreed) abort_job(ending.code, fmt::format("rank {}: error: {}", program.rank, ending.message));
  }
  // The rank that writes stdout, alone: the job ends with its code, the others as they would.
  if (const std::string failed = stdout_failure(); !failed.empty() && ending.message.empty())
    ending = {failure_code(which), failed};
  if (!ending.message.empty() && (!agreed || program.rank == 0))
    fmt::print(stderr, "{}: error: {}\n", name, ending.message);
  {
    // MPI_Finalize waits for every rank: bounded like every other wait.
    const comm::Watchdog watch(program.rank, {program.finalize_timeout_s, "MPI_Finalize"});
    MPI_Finalize();
  }
  return exit_status(ending.code);
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
template <class Run>
int run_checkpoint_program(ProgramName which, int argc, char** argv, CLI::App& app, const Run& run) {
  return run_mpi_program(which, app.get_name(), argc, argv, [&](MpiProgram& program) {
    if (!parse_options(app, program)) return 0;
    // Each rank drives the GPU of its node-local rank (host threads: OMP_NUM_THREADS).
    const auto placement = runtime::place_rank(PipelineConfig(), MPI_COMM_WORLD);
    runtime::KokkosSession kokkos(placement);
    return run(placement.transport, program.rank, program.world_size);
  });
}

}  // namespace kpipe::apps
