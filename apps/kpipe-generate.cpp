// kpipe-generate: text from a trained checkpoint, on any pipeline layout. The model and the tokenizer come
// from the checkpoint (bytes, or the BPE model kpipe-prepare trained); the pipeline size is the world's:
//   kpipe-generate runs/ck --prompt "Once upon a time" --tokens 200 --temperature 0.8 --top-k 40 --seed 7
//   mpiexec -n 2 kpipe-generate runs/ck --prompt "..." --seed 7      (the same text as on one rank)
// The text (prompt and continuation) goes to stdout on rank 0 as it is generated; the speed to stderr.
// Each token is one full-window forward down the stages (runtime/generator.hpp says why).
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/plural.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/runtime/generator.hpp"

#include "mpi_program.hpp"
#include "storage_type.hpp"

namespace {

struct Options {
  std::string checkpoint, prompt, schedule = "1f1b";
  int tokens = 200, pipeline_size = 0, chunks = 1;
  kpipe::runtime::SamplingOptions sampling;
  bool quiet = false;
};

// Prints the text as it grows. A decoder may change its mind about the last characters (a multi-byte
// character still missing bytes decodes as U+FFFD until they come), so only a prefix that stays is printed.
class TextStream {
 public:
  TextStream(const kpipe::data::Tokenizer& tokenizer, bool print) : tokenizer_(&tokenizer), print_(print) {}
  void update(const std::vector<kpipe::Token>& tokens, bool final) {
    const std::string text = tokenizer_->decode(tokens);
    if (text.compare(0, printed_.size(), printed_) != 0) return;  // not settled yet
    std::size_t end = text.size();
    static const std::string replacement = "\xEF\xBF\xBD";  // U+FFFD: perhaps a character still incomplete
    while (!final && end >= printed_.size() + replacement.size() &&
           text.compare(end - replacement.size(), replacement.size(), replacement) == 0)
      end -= replacement.size();
    if (print_) {
      // A text that cannot be written (a full disk, a closed pipe) ends the run: nothing more would be seen.
      errno = 0;
      const std::size_t bytes = end - printed_.size();
      if (std::fwrite(text.data() + printed_.size(), 1, bytes, stdout) != bytes || std::fflush(stdout) != 0)
        throw std::runtime_error(fmt::format("cannot write the text to standard output ({})",
                                             errno ? std::strerror(errno) : "write error"));
    }
    printed_.assign(text, 0, end);
  }

 private:
  const kpipe::data::Tokenizer* tokenizer_;
  bool print_;
  std::string printed_;
};

// Generates on the checkpoint's model in train.precision (A: float, or bf16); the seconds it took.
template <class A>
double generate_text(const Options& o, const kpipe::Config& config, const kpipe::comm::ProcessGrid& grid,
                     kpipe::comm::TransportKind transport, const kpipe::data::Tokenizer& tokenizer,
                     std::vector<kpipe::Token> tokens, int rank) {
  using namespace kpipe;
  // The model alone: no optimizer, no training lists run; the layout's plan places the layers.
  const model::ModelDesc desc = model::describe(config.model);
  const runtime::RunPlan plan = runtime::plan_run(config, desc, grid, transport);
  runtime::StageModel<float, A> stage(config, desc, grid, plan);
  io::load_weights(stage, o.checkpoint);
  runtime::Generator<float, A> generator(stage, plan, tokenizer);
  TextStream stream(tokenizer, rank == 0 && !o.quiet);
  stream.update(tokens, false);
  const auto start = std::chrono::steady_clock::now();
  generator.generate(tokens, o.tokens, o.sampling, [&](Token) { stream.update(tokens, false); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stream.update(tokens, true);
  if (rank == 0 && !o.quiet) std::fputc('\n', stdout);
  std::fflush(stdout);
  return seconds;
}

int generate(Options o, kpipe::comm::TransportKind transport, int rank, int world_size) {
  using namespace kpipe;
  runtime::validate(o.sampling);
  require(o.tokens >= 0, "--tokens = {}: expected an integer >= 0", o.tokens);
  if (o.pipeline_size == 0) o.pipeline_size = world_size;
  require(o.pipeline_size >= 1 && o.pipeline_size == world_size,
          "--pipeline-size = {}: generation runs one pipeline, on all {} ranks", o.pipeline_size, world_size);
  // The checkpoint is read on every rank; a failure on any one (the file missing on one node) is agreed by
  // all before any work, and reported once.
  Config config;
  data::Tokenizer tokenizer;
  std::vector<Token> prompt;
  comm::agree(MPI_COMM_WORLD, {PipelineConfig{}.recv_timeout_s, "reading the checkpoint"}, [&] {
    config = io::checkpoint_config(o.checkpoint);
    tokenizer = io::read_checkpoint_tokenizer(o.checkpoint);
    prompt = tokenizer.encode(o.prompt);
    require(!prompt.empty(), "--prompt is empty: give some text to continue");
  });

  // One sequence per forward down this run's pipeline; the layout may differ from the one that trained.
  auto& p = config.pipeline;
  p.pipeline_size = o.pipeline_size;
  p.data_parallel = 1;
  p.chunks = o.chunks;
  p.schedule = option_value<ScheduleKind>("--schedule", o.schedule);
  p.schedule_file.clear();
  p.transport = runtime::resolved_choice(transport);
  // One sequence per micro-batch (the trainer's schedule, never run here, wants p of them when interleaved).
  config.train.batch = config.train.microbatches = o.pipeline_size;
  validate(config);
  auto grid = comm::make_grid(MPI_COMM_WORLD, p.pipeline_size, 1, p.recv_timeout_s);
  const double seconds = apps::with_storage_type(config.train.precision, [&](auto storage) {
    return generate_text<typename decltype(storage)::type>(o, config, grid, transport, tokenizer, prompt, rank);
  });
  comm::free_grid(grid);
  if (rank != 0) return 0;
  // The text went to stdout, this line goes to stderr. A launcher forwards a rank's two streams through pipes of
  // their own (mpiexec), which reach the terminal in no fixed order: the line waits until the text's end has had
  // the time to get there first.
  std::fflush(stdout);
  if (world_size > 1 && !o.quiet) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fmt::print(stderr, "kpipe-generate: {} in {:.2f} s ({:.1f} ms per token: a forward of {} tokens on {}), {} "
             "tokenizer, vocabulary {}, temperature {}, top-k {}, seed {}\n",
             quantity(o.tokens, "token"), seconds, o.tokens > 0 ? 1e3 * seconds / o.tokens : 0.0, config.model.seq_len,
             quantity(o.pipeline_size, "rank"), data::to_string(tokenizer.kind()), tokenizer.vocab(),
             o.sampling.temperature, o.sampling.top_k, o.sampling.seed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Generates text from a checkpoint (model and tokenizer from the checkpoint) on any pipeline layout.",
               "kpipe-generate");
  app.add_option("checkpoint", o.checkpoint, "a checkpoint file (step-<N>.h5) or a checkpoint.dir (its latest)")
      ->required();
  app.add_option("--prompt", o.prompt, "text to continue")->required();
  app.add_option("--tokens", o.tokens, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", o.sampling.temperature, "softmax temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", o.sampling.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--seed", o.sampling.seed, "seed of the sampling: the same seed gives the same text on any layout")
      ->capture_default_str();
  app.add_option("--pipeline-size", o.pipeline_size, "stages (default: the number of MPI ranks)");
  app.add_option("--chunks", o.chunks, "model chunks per rank (with --schedule interleaved)");
  app.add_option("--schedule", o.schedule, "schedule whose layer placement to use");
  app.add_flag("--quiet", o.quiet, "print only the speed (stderr), not the text");
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::generate));
  return kpipe::apps::run_checkpoint_program(kpipe::ProgramName::generate, argc, argv, app,
                                             [&](kpipe::comm::TransportKind transport, int rank, int world_size) {
                                               return generate(o, transport, rank, world_size);
                                             });
}
