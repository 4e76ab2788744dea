#pragma once
// Stopping a run cleanly on SIGUSR1 or SIGTERM (a batch system's warning before the time limit, or a
// preemption). The handler only records the signal; at the next step boundary every rank asks
// stop_requested(world), an MPI_Allreduce of the flags, so all ranks agree, write one checkpoint together
// and exit with exit_checkpointed_on_signal, which the Slurm scripts (scripts/slurm/) requeue on.
#include <mpi.h>

namespace kpipe::runtime {

// "Checkpoint written on a signal: requeue me" (EX_TEMPFAIL of sysexits.h: a temporary failure, retry).
inline constexpr int exit_checkpointed_on_signal = 75;

// Installs the handlers for SIGUSR1 and SIGTERM (sigaction, SA_RESTART).
void install_stop_handlers();

// The signal this process received since the last reset (0: none). Async-signal-safe to set, cheap to read.
int received_stop_signal();
void reset_stop_signal();

// Collective over `world` (bounded by timeout_s, comm/bounded.hpp): the largest signal number any rank
// received (0: none), the same on every rank.
int stop_requested(MPI_Comm world, double timeout_s);

}  // namespace kpipe::runtime
