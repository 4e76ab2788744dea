#pragma once
// Stopping a run cleanly on SIGUSR1 or SIGTERM. The handler only records the signal; every rank passes what it
// received with its step's report (stop_votes, summed over the world with the step's losses), so that all
// ranks learn the same signal from the same report (agreed_stop_signal), write one checkpoint together and exit
// with stop_exit_code(signal):
//  - SIGUSR1, a batch system's warning before the time limit (sbatch --signal=B:USR1@120) or a request by
//    hand: 75, "checkpointed: requeue me", which the Slurm scripts (scripts/slurm/) requeue on;
//  - SIGTERM, the job is being ended (scancel, a time limit reached): 128 + 15, the shell's code for
//    "terminated", so that nothing requeues it; the checkpoint is there for a later --resume.
// SIGTERM wins when both arrived, on one rank or across ranks.
#include <array>
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

// A rank's signal as its share of a sum over the world: {1, 0} for SIGTERM, {0, 1} for SIGUSR1, {0, 0} for
// none. (A sum, so that it travels in the step report's one MPI_SUM of doubles.)
std::array<double, 2> stop_votes(int signal);
// The signal the summed votes stand for: SIGTERM if any rank got it, else SIGUSR1 if any did, else 0.
int agreed_stop_signal(const std::array<double, 2>& votes);

}  // namespace kpipe::runtime
