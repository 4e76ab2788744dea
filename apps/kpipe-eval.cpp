// kpipe-eval: the mean per-token loss of a checkpoint over consecutive, non-overlapping windows of
// seq_len + 1 tokens from the start of a token file (kpipe-prepare) or a text file. The model comes from
// the checkpoint (its config attribute), and so does the tokenizer: a text file is encoded with it, and a
// token file must have been made by the same one. The pipeline layout is this run's:
//   mpiexec -n 4 kpipe-eval runs/ckpt/step-00000100.h5 --data corpus.h5 --pipeline-size 4
// Prints the loss with 9 significant digits on stdout (rank 0); details on stderr. The result is the same
// on every layout (forward passes are bit-identical across layouts, docs/architecture.md, property 1).
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/plural.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/data/token_file.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/runtime/trainer.hpp"

#include "mpi_program.hpp"
#include "storage_type.hpp"

namespace {

struct Options {
  std::string checkpoint, data, split = "all", schedule = "1f1b";
  int pipeline_size = 1, chunks = 1;
  long long max_windows = 0;
};

// The tokens to evaluate on, in file order: a token file's splits (train then validation, or one of
// them), or a whole text file encoded with the checkpoint's tokenizer. Files are read by range as the
// windows are evaluated; only a text file with another tokenizer than bytes is encoded here, in memory
// (kpipe-prepare makes a token file of a large one).
kpipe::data::TokenSplit load_tokens(const Options& o, const kpipe::data::Tokenizer& tokenizer) {
  using namespace kpipe;
  const std::string label = fmt::format("--data = {}", o.data);
  if (!data::is_token_file(o.data, label)) {
    require(o.split == "all", "--split = {}: a text file has no splits (use all)", o.split);
    if (tokenizer.kind() == data::TokenizerKind::bytes) return data::text_file_corpus(o.data, 0.0, label).train;
    return tokenizer.encode(kpipe::read_bytes(o.data, label));
  }
  auto corpus = data::read_token_file(o.data, label);
  require(corpus.tokenizer.kind() == tokenizer.kind() && corpus.tokenizer.serialized_model() == tokenizer.serialized_model(),
          "--data = {}: made by a {} tokenizer (vocabulary {}) other than the checkpoint's ({}, vocabulary {})", o.data,
          data::to_string(corpus.tokenizer.kind()), corpus.vocab(), data::to_string(tokenizer.kind()), tokenizer.vocab());
  if (o.split == "train") return corpus.train;
  if (o.split == "validation") return corpus.validation;
  return data::concatenate(corpus.train, corpus.validation);
}

// The checkpoint's mean loss over the corpus' validation windows, computed in train.precision (A: float, or bf16).
template <class A>
double checkpoint_loss(const kpipe::Config& config, const kpipe::data::Corpus& corpus, const kpipe::comm::ProcessGrid& grid,
                       kpipe::comm::TransportKind transport, const std::string& checkpoint) {
  using namespace kpipe;
  runtime::TrainerOptions options;
  options.transport = transport;
  runtime::Trainer<float, A> trainer(config, corpus, grid, options);
  io::load_weights(trainer.stage(), checkpoint);
  return trainer.evaluate();
}

int evaluate(const Options& o, kpipe::comm::TransportKind transport, int rank) {
  using namespace kpipe;
  require(o.pipeline_size >= 1, "--pipeline-size = {}: expected an integer >= 1", o.pipeline_size);
  require(o.chunks >= 1, "--chunks = {}: expected an integer >= 1", o.chunks);
  require(o.max_windows >= 0, "--max-windows = {}: expected an integer >= 0 (0: all)", o.max_windows);
  // The checkpoint is read and the data opened on every rank; a failure on any one (a file missing on one node)
  // is agreed by all before any work, and reported once.
  Config config;
  io::CheckpointInfo info;
  data::Corpus corpus;
  std::int64_t windows = 0;
  comm::agree(MPI_COMM_WORLD, {config.pipeline.recv_timeout_s, "reading the checkpoint and the data"}, [&] {
    config = io::checkpoint_config(o.checkpoint);
    info = io::read_checkpoint_info(o.checkpoint);
    corpus.tokenizer = io::read_checkpoint_tokenizer(o.checkpoint);
    corpus.validation = load_tokens(o, corpus.tokenizer);
    corpus.source = o.data;
    const std::int64_t available =
        data::validation_windows(std::int64_t(corpus.validation.size()), config.model.seq_len);
    windows = o.max_windows > 0 ? std::min<std::int64_t>(available, o.max_windows) : available;
    require(windows > 0, "--data = {}: {} tokens hold no window of model.seq_len + 1 = {} tokens", o.data,
            corpus.validation.size(), config.model.seq_len + 1);
    corpus.validation = corpus.validation.slice(0, windows * (config.model.seq_len + 1));  // exactly `windows` windows
    // The ranks that will read the windows (the first and the last stage) read them once now: a damaged
    // chunk stops every rank here, agreed, rather than one rank midway.
    if (rank == 0 || rank == o.pipeline_size - 1) data::check_readable(corpus.validation);
  });
  // One window per micro-batch, one micro-batch per stage: evaluate() then walks every window in order.
  auto& p = config.pipeline;
  p.pipeline_size = o.pipeline_size;
  p.data_parallel = 1;
  p.chunks = o.chunks;
  p.schedule = option_value<ScheduleKind>("--schedule", o.schedule);
  p.schedule_file.clear();
  p.transport = runtime::resolved_choice(transport);
  config.train.microbatches = config.train.batch = o.pipeline_size;
  config.train.eval_batches = int((windows + config.train.batch - 1) / config.train.batch);
  validate(config);
  auto grid = comm::make_grid(MPI_COMM_WORLD, p.pipeline_size, 1, p.recv_timeout_s);
  const double loss = apps::with_storage_type(config.train.precision, [&](auto storage) {
    return checkpoint_loss<typename decltype(storage)::type>(config, corpus, grid, transport, o.checkpoint);
  });
  comm::free_grid(grid);
  if (rank == 0) {
    fmt::print(stderr, "kpipe-eval: checkpoint step {}, {} of {} tokens from {}\n", info.step,
               quantity(windows, "window"), config.model.seq_len + 1, o.data);
    fmt::print("{:.9g}\n", loss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Mean loss of a checkpoint over consecutive windows of seq_len + 1 tokens of a file.", "kpipe-eval");
  app.add_option("checkpoint", o.checkpoint, "a checkpoint file (step-<N>.h5) or a checkpoint.dir (its latest)")
      ->required();
  app.add_option("--data", o.data, "HDF5 token file (kpipe-prepare) or text file")->required();
  app.add_option("--split", o.split, "of a token file: all (train then validation), train or validation")
      ->check(CLI::IsMember({"all", "train", "validation"}));
  app.add_option("--pipeline-size", o.pipeline_size, "stages (= the number of MPI ranks)");
  app.add_option("--chunks", o.chunks, "model chunks per rank (with --schedule interleaved)");
  app.add_option("--schedule", o.schedule, "schedule whose layer placement to use");
  app.add_option("--max-windows", o.max_windows, "evaluate at most this many windows (0: all)");
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::eval));
  return kpipe::apps::run_checkpoint_program(kpipe::ProgramName::eval, argc, argv, app,
                                             [&](kpipe::comm::TransportKind transport, int rank, int) {
                                               return evaluate(o, transport, rank);
                                             });
}
