#pragma once
// How every kpipe program ends, on every rank: the exit codes in one place, the table that every program's
// --help and docs/user-guide.md's "Exit codes" are made from (tests/core/test_exit_codes.cpp checks the
// guide against it), and the one way to end the whole job from one rank.
#include <string>
#include <string_view>
#include <vector>

namespace kpipe {

enum class ExitCode : int {
  ok = 0,
  failure = 1,                  // a bug or a system failure, or a stop signal with nowhere to checkpoint
  bad_input = 2,                // config, data, checkpoint, schedule: one line naming the key and value, every rank alike
  peer_lost = 3,                // a receive, send or collective waited pipeline.recv_timeout_s: the job is aborted
  non_finite = 4,               // train.max_skipped_steps steps in a row with a non-finite loss or gradient
  checkpoint_failed = 5,        // a checkpoint could not be written (`latest` unchanged)
  replicas_disagree = 6,        // silent data corruption: replicas (or a recomputation) differ; resubmit excluding the nodes
  checkpointed_on_signal = 75,  // SIGUSR1 arrived and a checkpoint was written: requeue me (EX_TEMPFAIL)
  checkpointed_on_sigterm = 143,  // the same on SIGTERM: 128 + 15, the shell's "terminated" (runtime/signals.hpp)
};

constexpr int exit_status(ExitCode code) { return static_cast<int>(code); }

// Every code above, in increasing order: the table's test reads this list. The switch of is_exit_code (no
// default, and -Wswitch an error there: an enumerator missing from it fails the build) and the static_assert
// below (every status a process can return, 0 to 255, is listed exactly when it is an enumerator) keep the list
// complete.
constexpr ExitCode every_exit_code[] = {ExitCode::ok,
                                        ExitCode::failure,
                                        ExitCode::bad_input,
                                        ExitCode::peer_lost,
                                        ExitCode::non_finite,
                                        ExitCode::checkpoint_failed,
                                        ExitCode::replicas_disagree,
                                        ExitCode::checkpointed_on_signal,
                                        ExitCode::checkpointed_on_sigterm};

#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
constexpr bool is_exit_code(ExitCode code) {
  switch (code) {
    case ExitCode::ok:
    case ExitCode::failure:
    case ExitCode::bad_input:
    case ExitCode::peer_lost:
    case ExitCode::non_finite:
    case ExitCode::checkpoint_failed:
    case ExitCode::replicas_disagree:
    case ExitCode::checkpointed_on_signal:
    case ExitCode::checkpointed_on_sigterm:
      return true;
  }
  return false;
}
#pragma GCC diagnostic pop

constexpr bool every_exit_code_is_listed() {
  for (int status = 0; status < 256; ++status) {
    bool listed = false;
    for (const ExitCode code : every_exit_code) listed = listed || exit_status(code) == status;
    if (listed != is_exit_code(static_cast<ExitCode>(status))) return false;
  }
  return true;
}
static_assert(every_exit_code_is_listed(), "every_exit_code lists each ExitCode once, and nothing else");

// The programs, as bits: which of them a row of the table is about.
enum class ProgramName : unsigned {
  train = 1u << 0,
  eval = 1u << 1,
  generate = 1u << 2,
  prepare = 1u << 3,
  sim = 1u << 4,
  inspect = 1u << 5,
  export_model = 1u << 6,  // kpipe-export
  import_model = 1u << 7,  // kpipe-import
};

struct ExitCodeRow {
  int code;
  unsigned programs;         // ProgramName bits
  std::string_view meaning;  // as --help and the user guide say it
};

// Every program's exit codes, in the order the user guide's table lists them. A code can mean something of
// its own in one program (kpipe-inspect's 1 and 3): a row of its own.
const std::vector<ExitCodeRow>& exit_code_table();

// "kpipe-train", or "every program", or "kpipe-eval, kpipe-generate": a row's programs as the guide names them.
std::string programs_text(unsigned programs);

// The --help footer of `program`: "Exit codes:" and one line (wrapped) per row of the table about it.
std::string exit_codes_help(ProgramName program);

// The code of a failure that is not bad input (a bug, a system failure): 1, but 2 for kpipe-inspect, whose 1
// means that `diff` found differences.
ExitCode failure_code(ProgramName program);

// Prints "<program>: <line>" on stderr (after flushing stdout) and ends this process with `code` without
// MPI_Finalize, which ends the whole job (exit_codes.cpp says how). For failures one rank alone sees: a peer
// that stopped answering, an error during training.
[[noreturn]] void abort_job(ExitCode code, const std::string& line);

}  // namespace kpipe
