#include "kpipe/core/exit_codes.hpp"

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>
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
      {1, pipeline_programs | bits(ProgramName::prepare) | bridge_programs,
       "failure: a bug or a system failure (an MPI job is aborted, naming the rank)"},
      {1, bits(ProgramName::train), "stopped by a signal with no `checkpoint.dir` to checkpoint into"},
      {1, bits(ProgramName::sim), "`--recommend` found no layout that fits"},
      {1, bits(ProgramName::inspect), "`diff`: the checkpoints differ"},
      {2, every_program, "bad input (configuration, data, checkpoint, schedule, world size): one line names the key "
                         "and the value, on every rank; or a damaged chunk of the token file, found when first read"},
      {3, pipeline_programs, "a rank stopped answering: a receive, send or collective waited "
                             "`pipeline.recv_timeout_s` (the job is aborted)"},
      {3, bits(ProgramName::inspect), "the checkpoint is damaged or incomplete (every problem listed)"},
      {4, bits(ProgramName::train), "`train.max_skipped_steps` steps in a row had a non-finite loss or gradient "
                                    "(each was skipped on every rank)"},
      {5, bits(ProgramName::train), "a checkpoint could not be written (`checkpoint.on_failure = \"stop\"`, or on a "
                                    "stop signal); nothing was published, `latest` is unchanged"},
      {exit_status(ExitCode::checkpointed_on_signal), bits(ProgramName::train),
       "SIGUSR1 arrived and a checkpoint was written: requeue the job and `--resume`"},
      {exit_status(ExitCode::checkpointed_on_sigterm), bits(ProgramName::train),
       "the same after SIGTERM (128 + 15): the job is being ended, not to be requeued (`--resume` continues it "
       "later)"},
  };
  return table;
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
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    // MPI_Abort asks the launcher to end every rank. One this node cannot reach (its network link is down) can
    // leave the call waiting for minutes: the process ends itself after 10 s all the same.
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      std::_Exit(exit_status(code));
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, exit_status(code));
  }
  std::_Exit(exit_status(code));
}

}  // namespace kpipe
