#pragma once
// How every kpipe program ends, on every rank: the exit codes in one place (docs/user-guide.md lists them),
// and the one way to end the whole job from one rank.
#include <string>

namespace kpipe {

enum class ExitCode : int {
  ok = 0,
  failure = 1,                  // a bug or a system failure, or a stop signal with nowhere to checkpoint
  bad_input = 2,                // config, data, checkpoint, schedule: one line naming the key and value, every rank alike
  peer_lost = 3,                // a receive, send or collective waited pipeline.recv_timeout_s: the job is aborted
  non_finite = 4,               // train.max_skipped_steps steps in a row with a non-finite loss or gradient
  checkpoint_failed = 5,        // a checkpoint could not be written (`latest` unchanged)
  checkpointed_on_signal = 75,  // SIGUSR1 arrived and a checkpoint was written: requeue me (EX_TEMPFAIL)
};

constexpr int exit_status(ExitCode code) { return static_cast<int>(code); }

// Prints `line` on stderr and ends every rank of the job with `code` (MPI_Abort on MPI_COMM_WORLD; a process
// without MPI exits). For failures one rank alone sees: a peer that stopped answering, an error during training.
[[noreturn]] void abort_job(ExitCode code, const std::string& line);

}  // namespace kpipe
