#pragma once
// Stopping a run cleanly on SIGUSR1 or SIGTERM. The handler only records the signal; at the next step
// boundary every rank asks stop_requested(world), a bounded allreduce of the flags, so all ranks agree, write
// one checkpoint together and exit with stop_exit_code(signal):
//  - SIGUSR1, a batch system's warning before the time limit (sbatch --signal=B:USR1@120) or a request by
//    hand: 75, "checkpointed: requeue me", which the Slurm scripts (scripts/slurm/) requeue on;
//  - SIGTERM, the job is being ended (scancel, a time limit reached): 128 + 15, the shell's code for
//    "terminated", so that nothing requeues it; the checkpoint is there for a later --resume.
// SIGTERM wins when both arrived (the reduction takes the larger signal number).
#include <mpi.h>

#include <csignal>

#include "kpipe/core/exit_codes.hpp"

namespace kpipe::runtime {

// The exit code after a checkpoint written on `signal`: ExitCode::checkpointed_on_signal (75) for SIGUSR1,
// 128 + signal otherwise.
constexpr int stop_exit_code(int signal) {
  return signal == SIGUSR1 ? exit_status(ExitCode::checkpointed_on_signal) : 128 + signal;
}

// Installs the handlers for SIGUSR1 and SIGTERM (sigaction, SA_RESTART). kpipe-train calls it first thing in
// main, so that a signal sent while the job starts (MPI, Kokkos, data, model) is kept, not fatal.
void install_stop_handlers();

// The signal this process received since the last reset (0: none). Async-signal-safe to set, cheap to read.
int received_stop_signal();
void reset_stop_signal();

// Collective over `world` (bounded by timeout_s, comm/bounded.hpp): the largest signal number any rank
// received (0: none), the same on every rank.
int stop_requested(MPI_Comm world, double timeout_s);

}  // namespace kpipe::runtime
