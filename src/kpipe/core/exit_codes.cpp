#include "kpipe/core/exit_codes.hpp"

#include "kpipe/core/program_name.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace kpipe {

static_assert(exit_status(ExitCode::checkpointed_on_sigterm) == 128 + SIGTERM, "the shell's code for SIGTERM");

namespace {

constexpr unsigned bits(ProgramName p) { return static_cast<unsigned>(p); }

constexpr unsigned every_program = bits(ProgramName::train) | bits(ProgramName::eval) | bits(ProgramName::generate) |
                                   bits(ProgramName::prepare) | bits(ProgramName::sim) | bits(ProgramName::inspect) |
                                   bits(ProgramName::export_model) | bits(ProgramName::import_model);
// The programs that convert models to and from Hugging Face's files.
constexpr unsigned bridge_programs = bits(ProgramName::export_model) | bits(ProgramName::import_model);
// The programs that run a pipeline of MPI ranks.
constexpr unsigned pipeline_programs = bits(ProgramName::train) | bits(ProgramName::eval) | bits(ProgramName::generate);

constexpr std::pair<ProgramName, std::string_view> program_names[] = {
    {ProgramName::train, "kpipe-train"},     {ProgramName::eval, "kpipe-eval"},
    {ProgramName::generate, "kpipe-generate"}, {ProgramName::prepare, "kpipe-prepare"},
    {ProgramName::sim, "kpipe-sim"},         {ProgramName::inspect, "kpipe-inspect"},
    {ProgramName::export_model, "kpipe-export"}, {ProgramName::import_model, "kpipe-import"}};

// Appends `text` to `out` in lines of at most `width` characters, each after `indent`.
void append_wrapped(std::string& out, std::string_view text, std::size_t width, std::string_view indent) {
  std::size_t line = 0;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    if (line > 0 && line + 1 + word.size() > width) {
      out += "\n";
      out += indent;
      line = 0;
    } else if (line > 0) {
      out += ' ';
      ++line;
    }
    out += word;
    line += word.size();
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
  }
}

}  // namespace

const std::vector<ExitCodeRow>& exit_code_table() {
  static const std::vector<ExitCodeRow> table = {
      {0, every_program & ~bits(ProgramName::inspect), "done"},
      {0, bits(ProgramName::inspect), "nothing wrong: `diff` found the checkpoints identical, or every byte of the "
                                      "checkpoint was verified"},
      {1, pipeline_programs | bridge_programs, "failure: a bug or a system failure (an unwritable stdout, say): one line; one rank's "
                             "ends the whole job, naming the rank"},
      {1, bits(ProgramName::prepare), "failure: a bug or a system failure (an unwritable stdout, say): one line"},
      {1, bits(ProgramName::train), "stopped by a signal with no `checkpoint.dir` to checkpoint into"},
      {1, bits(ProgramName::sim), "`recommend` found no layout that fits"},
      {1, bits(ProgramName::inspect), "`diff`: the checkpoints differ"},
      {2, pipeline_programs | bits(ProgramName::sim),
       "bad input (configuration, data, checkpoint, schedule, world size, a model larger than memory): one line names "
       "the key and the value, on every rank; or a damaged chunk of the token file, found when first read"},
      {2, bits(ProgramName::prepare), "bad input (options, input files, the output's place, a text too short for two "
                                      "splits, more memory than there is): one line names the option and the value"},
      {2, bits(ProgramName::inspect), "bad input (a missing or non-HDF5 file, a file of the wrong kind, a step not in "
                                      "the timeline, wrong arguments) or a failure: one line on stderr"},
      {3, pipeline_programs, "a rank stopped answering: a receive, send or collective waited "
                             "`pipeline.recv_timeout_s` (the job is ended)"},
      {3, bits(ProgramName::inspect), "the checkpoint is damaged or incomplete (every problem listed)"},
      {4, bits(ProgramName::train), "`train.max_skipped_steps` steps in a row had a non-finite loss or gradient "
                                    "(each was skipped on every rank)"},
      {5, bits(ProgramName::train), "a checkpoint could not be written (`checkpoint.on_failure = \"stop\"`, or on a "
                                    "stop signal); nothing was published, `latest` is unchanged"},
      {6, bits(ProgramName::train), "silent data corruption: the replicas of a stage held different weights or "
                                    "optimizer state (`check.replicas_every`), or a forward computed twice gave "
                                    "different bytes (`check.recompute_every`); one line names the step, stage, "
                                    "replicas and nodes; nothing of that state was checkpointed: resubmit excluding "
                                    "those nodes"},
      {exit_status(ExitCode::checkpointed_on_signal), bits(ProgramName::train),
       "SIGUSR1 arrived and a checkpoint was written: requeue the job and `--resume`"},
      {exit_status(ExitCode::checkpointed_on_sigterm), bits(ProgramName::train),
       "the same after SIGTERM (128 + 15): the job is being ended, not to be requeued (`--resume` continues it "
       "later)"},
  };
  return table;
}

ExitCode failure_code(ProgramName program) {
  // kpipe-inspect's 1 says that `diff` found differences; like diff(1), it reports trouble with 2.
  return program == ProgramName::inspect ? ExitCode::bad_input : ExitCode::failure;
}

std::string programs_text(unsigned programs) {
  if (programs == every_program) return "every program";
  std::string text;
  for (const auto& [program, name] : program_names)
    if (programs & bits(program)) text += (text.empty() ? "" : ", ") + std::string(name);
  return text;
}

std::string exit_codes_help(ProgramName program) {
  std::string help = "Exit codes:";
  for (const ExitCodeRow& row : exit_code_table()) {
    if (!(row.programs & bits(program))) continue;
    const std::string code = std::to_string(row.code);
    help += "\n  " + code + std::string(5 - code.size(), ' ');
    append_wrapped(help, row.meaning, 100, "       ");
  }
  return help;
}

void abort_job(ExitCode code, const std::string& line) {
  std::fflush(stdout);  // what the program printed so far (generated text, say) is not lost
  std::fprintf(stderr, "%s: %s\n", std::string(program_name()).c_str(), line.c_str());
  std::fflush(stderr);
  // Not MPI_Abort: Open MPI's prints a 7-line banner of its own, often before this line, and on a node cut off
  // from the launcher it can wait for minutes. A process that exits before MPI_Finalize ends the job as surely:
  // mpiexec (Open MPI, Hydra) and srun --kill-on-bad-exit end every other rank at once, and under any launcher
  // the others' bounded waits end them within pipeline.recv_timeout_s.
  std::_Exit(exit_status(code));
}

}  // namespace kpipe
