// kpipe-prepare: writes an HDF5 token file (train and validation splits, and the tokenizer that made them)
// for `kpipe-train --data FILE`, from text (files, directories of files, read in the order given as one
// text) or from the embedded synthetic corpus:
//   kpipe-prepare INPUT... -o OUT.h5 [--val-fraction 0.1]                        bytes as tokens
//   kpipe-prepare INPUT... -o OUT.h5 --tokenizer bpe --vocab-size 8192          a BPE model trained on INPUT
//   kpipe-prepare --synthetic -o OUT.h5 [--tokens N] [--seed S] [--val-fraction 0.1]
// The text is streamed: encoded in batches on every core in bounded memory, whatever its size
// (data/text_encoder.hpp); so is the synthetic corpus. The BPE model is trained on the training split only
// (the held-out end of the text stays unseen), on a bounded sample of it (--sample-bytes). The output takes its
// name only when complete.
// A plain program: no MPI, no Kokkos (the library's HDF5 is the parallel build, but serial file access
// needs neither).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kpipe/core/bytes.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/host_memory.hpp"
#include "kpipe/core/plural.hpp"
#include "kpipe/data/bpe_sample.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/data/entropy.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/text_encoder.hpp"
#include "kpipe/data/text_inputs.hpp"
#include "kpipe/data/token_file.hpp"
#include "kpipe/data/token_file_writer.hpp"
#include "kpipe/h5/file.hpp"

#include "program.hpp"

namespace {

struct Options {
  std::vector<std::string> inputs;
  std::string output;
  bool synthetic = false;
  double val_fraction = kpipe::DataConfig{}.val_fraction;
  std::int64_t tokens = kpipe::DataConfig{}.synthetic_tokens;
  std::uint64_t seed = kpipe::TrainConfig{}.seed;
  bool tokens_given = false, seed_given = false;
  std::string tokenizer = "bytes";
  int vocab_size = kpipe::data::BpeOptions{}.vocab_size;
  bool vocab_size_given = false;
  std::int64_t sample_bytes = std::int64_t(100) << 20;
  bool sample_bytes_given = false;
  int threads = 0;
  bool quiet = false;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  return std::filesystem::exists(b, error) && std::filesystem::equivalent(a, b, error);
}

void check(const Options& o) {
  using kpipe::require;
  require(o.synthetic || !o.inputs.empty(), "give text files (or directories) to tokenize, or --synthetic");
  require(!(o.synthetic && !o.inputs.empty()), "give text files or --synthetic, not both (got '{}')", o.inputs.front());
  require(o.synthetic || (!o.tokens_given && !o.seed_given), "--tokens and --seed need --synthetic");
  require(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction = {}: expected a number in (0, 1)",
          o.val_fraction);
  require(o.tokens >= 1, "--tokens = {}: expected a positive integer", o.tokens);
  require(o.tokenizer == "bytes" || o.tokenizer == "bpe", "--tokenizer = {}: expected bytes or bpe", o.tokenizer);
  require(o.tokenizer == "bpe" || !o.vocab_size_given, "--vocab-size needs --tokenizer bpe (bytes have 256)");
  require(o.tokenizer == "bpe" || !o.sample_bytes_given, "--sample-bytes needs --tokenizer bpe (bytes need no training)");
  require(o.sample_bytes >= 1, "--sample-bytes = {}: expected a positive number of bytes", o.sample_bytes);
  require(o.threads >= 0, "--threads = {}: expected an integer >= 0 (0: every core)", o.threads);
  require(o.tokenizer == "bytes" || !o.synthetic, "--tokenizer bpe: the synthetic corpus is bytes (give a text file)");
  require(o.tokenizer == "bytes" || kpipe::data::sentencepiece_available(),
          "--tokenizer bpe: this kpipe was built without SentencePiece (KPIPE_ENABLE_SENTENCEPIECE)");
  // Written beside it and renamed over it: never over a device node, a FIFO or a directory.
  kpipe::require_writable(o.output, fmt::format("--output = {}", o.output));
}

// The text's files, each readable, none of them the output; both splits non-empty.
kpipe::data::TextStream text_of(const Options& o) {
  using namespace kpipe;
  data::TextStream text(data::list_text_files(o.inputs));
  for (const auto& file : text.files())
    require(!same_file(file.path, o.output) && !same_file(file.path, o.output + ".partial"),
            "--output = {} is one of the input files ('{}')", o.output, file.path);
  require(text.size() > 0, "input '{}': no text ({}, 0 bytes)", o.inputs.front(),
          quantity(text.files().size(), "file"));
  return text;
}

// Decimal units, as the rates: kB, MB, GB.
std::string decimal_size(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} kB", bytes / 1e3);
}

std::string eta(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60) : fmt::format("{}m{:02d}s", s / 60, s % 60);
}

// The progress line on stderr: rewritten in place on a terminal (twice a second), a line every 10 s
// otherwise (a log), and always the last.
class ProgressLine {
 public:
  ProgressLine(std::int64_t total, bool quiet)
      : total_(total), quiet_(quiet), terminal_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}

  void update(std::int64_t done) {
    const double elapsed = seconds_since(start_);
    const bool finished = done >= total_;
    if (quiet_ || (!finished && elapsed - printed_ < (terminal_ ? 0.5 : 10.0))) return;
    printed_ = elapsed;
    const double rate = elapsed > 0 ? double(done) / elapsed : 0.0;
    const std::string line =
        fmt::format("kpipe-prepare: encoded {} of {} ({:.0f}%), {:.1f} MB/s, ETA {}", decimal_size(double(done)),
                    decimal_size(double(total_)), 100.0 * double(done) / double(total_), rate / 1e6,
                    eta(rate > 0 ? double(total_ - done) / rate : 0.0));
    if (terminal_)
      fmt::print(stderr, "\r{:<90}{}", line, finished ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  }

 private:
  std::int64_t total_;
  bool quiet_, terminal_;
  Clock::time_point start_;
  double printed_ = 0;  // the first line after a first interval
};

// The BPE model, trained on (a bounded sample of) the training split: bytes [0, train_bytes) of the text.
kpipe::data::Tokenizer train_tokenizer(const kpipe::data::TextStream& text, std::int64_t train_bytes, const Options& o) {
  using namespace kpipe::data;
  const auto start = Clock::now();
  // The sample itself and SentencePiece's peak on it, about 4.4 bytes a byte of sample (458 MiB for 105 MB,
  // docs/performance.md): checked first, as SentencePiece's threads end the process on an allocation that fails.
  const double sample_bytes = double(std::min(train_bytes, o.sample_bytes));
  const std::string input = fmt::format("--sample-bytes = {}", o.sample_bytes);
  const std::string built = fmt::format("training the BPE model on a sample of {}", decimal_size(sample_bytes));
  const double needed = 5.4 * sample_bytes;
  const std::int64_t available = kpipe::process_memory_available();
  kpipe::require(available < 0 || needed <= double(available),
                 "{}: {} needs about {}, more than the {} this process can get: a smaller --sample-bytes", input,
                 built, kpipe::format_estimated_bytes(needed), kpipe::format_bytes(available));
  BpeOptions options;
  options.vocab_size = o.vocab_size;
  options.threads = o.threads;
  const std::string sample = kpipe::building_in_memory(input, built, needed, [&] {
    return bpe_sample(text, train_bytes, o.sample_bytes);
  });
  const Tokenizer tokenizer =
      kpipe::building_in_memory(input, built, needed, [&] { return train_bpe(sample, options); });
  fmt::print("kpipe-prepare: BPE model trained on {} bytes{} in {:.1f} s: vocabulary {}{}\n", sample.size(),
             std::int64_t(sample.size()) < train_bytes
                 ? fmt::format(" (a sample of the {} of the training split, --sample-bytes)", decimal_size(double(train_bytes)))
                 : "",
             seconds_since(start), tokenizer.vocab(),
             tokenizer.vocab() < o.vocab_size
                 ? fmt::format(" (asked {}: the text has too few distinct pieces for more)", o.vocab_size)
                 : "");
  return tokenizer;
}

struct Written {
  std::int64_t train = 0, validation = 0, bytes = 0;
  double entropy = 0;
  kpipe::data::Tokenizer tokenizer;
  std::string source;
};

// Each split must hold a window of the smallest model: seq_len + 1 tokens (a shorter one trains nothing).
void require_windows(const Options& o, const std::string& what, std::int64_t train, std::int64_t validation) {
  constexpr std::int64_t window = kpipe::ModelConfig::min_seq_len + 1;
  kpipe::require(train >= window && validation >= window,
                 "{}: gives a train split of {} and a validation split of {} at --val-fraction = {}; each split needs "
                 "at least {} tokens (a window of the smallest model.seq_len, {}, plus 1)",
                 what, kpipe::quantity(train, "token"), kpipe::quantity(validation, "token"), o.val_fraction, window,
                 kpipe::ModelConfig::min_seq_len);
}

Written prepare_text(const Options& o) {
  using namespace kpipe::data;
  const TextStream text = text_of(o);
  const std::string what = fmt::format("input '{}' ({})", o.inputs.front(), kpipe::quantity(text.size(), "byte"));
  const std::int64_t train_bytes = text.size() - held_out(text.size(), o.val_fraction);
  require_windows(o, what, train_bytes, text.size() - train_bytes);  // bytes: at least as many as tokens
  Written written;
  written.tokenizer = o.tokenizer == "bpe" ? train_tokenizer(text, train_bytes, o) : Tokenizer();
  written.source = o.inputs.size() == 1 ? o.inputs.front() : fmt::format("{} and {} more", o.inputs.front(), o.inputs.size() - 1);
  TokenFileWriter writer(o.output, written.tokenizer, written.source, o.threads);
  ProgressLine progress(text.size(), o.quiet);
  EncodeOptions options;
  options.threads = o.threads;
  // Two batches of text in flight, each with its ids (data/text_encoder.hpp).
  const double batches = 2.0 * double(options.batch_bytes) * double(1 + sizeof(kpipe::Token));
  const EncodeSummary summary = kpipe::building_in_memory(
      what, fmt::format("encoding it in batches of {}", decimal_size(double(options.batch_bytes))), batches, [&] {
        return encode_text(text, train_bytes, written.tokenizer, writer, options,
                           [&](std::int64_t done) { progress.update(done); });
      });
  if (summary.invalid_utf8 > 0)
    fmt::print(stderr, "kpipe-prepare: warning: the text has {} bytes that are not valid UTF-8; BPE turned each into "
               "U+FFFD (use --tokenizer bytes to keep them)\n", summary.invalid_utf8);
  written.train = writer.tokens(Split::train);
  written.validation = writer.tokens(Split::validation);
  require_windows(o, what, written.train, written.validation);  // BPE's tokens are fewer than the bytes
  writer.commit();
  written.bytes = text.size();
  written.entropy = entropy_of_counts_nats(summary.train_counts);
  return written;
}

// The embedded synthetic corpus, streamed into the file as it is generated: bounded memory at any --tokens.
Written prepare_synthetic(const Options& o) {
  using namespace kpipe::data;
  const std::int64_t train = o.tokens - held_out(o.tokens, o.val_fraction);
  require_windows(o, fmt::format("--tokens = {}", o.tokens), train, o.tokens - train);
  Written written;
  written.source = fmt::format("synthetic(seed={}, tokens={})", o.seed, o.tokens);
  TokenFileWriter writer(o.output, written.tokenizer, written.source, o.threads);
  ProgressLine progress(o.tokens, o.quiet);
  std::vector<std::int64_t> counts(256, 0);
  std::int64_t done = 0;
  stream_synthetic_text(o.seed, o.tokens, std::size_t(32) << 20, [&](const std::string& piece) {
    const std::int64_t to_train = std::clamp<std::int64_t>(train - done, 0, std::int64_t(piece.size()));
    writer.append_bytes(Split::train, piece.data(), std::size_t(to_train));
    writer.append_bytes(Split::validation, piece.data() + to_train, piece.size() - std::size_t(to_train));
    for (std::int64_t i = 0; i < to_train; ++i) ++counts[static_cast<unsigned char>(piece[std::size_t(i)])];
    done += std::int64_t(piece.size());
    progress.update(done);
  });
  written.train = writer.tokens(Split::train);
  written.validation = writer.tokens(Split::validation);
  writer.commit();
  written.bytes = written.train + written.validation;
  written.entropy = entropy_of_counts_nats(counts);
  return written;
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app("Writes an HDF5 token file (bytes as tokens, or a BPE model's) for kpipe-train --data.",
               "kpipe-prepare");
  app.add_option("inputs", o.inputs, "text files or directories (every file under one, in path order), read in the "
                 "order given as one text")->type_name("INPUT...");
  app.add_option("-o,--output", o.output, "token file to write")->type_name("OUT.h5")->required();
  app.add_flag("--synthetic", o.synthetic, "the embedded synthetic corpus instead of a text file");
  app.add_option("--val-fraction", o.val_fraction, "share held out for validation (the end of the text)")
      ->capture_default_str();
  app.add_option("--tokens", o.tokens, "size of the synthetic corpus")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the synthetic corpus")->capture_default_str();
  app.add_option("--tokenizer", o.tokenizer, "bytes (every byte a token) or bpe (SentencePiece BPE trained on the "
                 "text, stored in the token file)")->capture_default_str();
  app.add_option("--vocab-size", o.vocab_size, "vocabulary of the BPE model (256 byte pieces, <unk>, merges)")
      ->capture_default_str();
  app.add_option("--sample-bytes", o.sample_bytes, "BPE trains on at most this many bytes of the training split "
                 "(whole lines spread evenly over it); SentencePiece needs several times the sample in memory")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "threads that encode and compress (0: every core)")->capture_default_str();
  app.add_flag("--quiet", o.quiet, "no progress line");
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::prepare) +
             "\nThe output takes its name only when complete: a run that fails leaves nothing half-written.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& error) {
    std::string message = error.what();
    while (!message.empty() && message.back() == '\n') message.pop_back();
    throw kpipe::InputError(message);
  }
  o.tokens_given = app.count("--tokens") > 0;
  o.seed_given = app.count("--seed") > 0;
  o.vocab_size_given = app.count("--vocab-size") > 0;
  o.sample_bytes_given = app.count("--sample-bytes") > 0;
  check(o);

  const auto start = Clock::now();
  const Written w = o.synthetic ? prepare_synthetic(o) : prepare_text(o);
  const std::int64_t tokens = w.train + w.validation;
  const double seconds = seconds_since(start);
  fmt::print("kpipe-prepare: wrote {}: {} tokenizer, vocabulary {}, train {} tokens, validation {} tokens "
             "({:.2f} bytes per token), unigram entropy {:.3f} nats ({:.3f} bits) per token, source {}; "
             "{} in {:.1f} s ({:.1f} MB/s)\n",
             o.output, kpipe::data::to_string(w.tokenizer.kind()), w.tokenizer.vocab(), w.train, w.validation,
             tokens > 0 ? double(w.bytes) / double(tokens) : 0.0, w.entropy, w.entropy / std::log(2.0), w.source,
             decimal_size(double(w.bytes)), seconds, seconds > 0 ? double(w.bytes) / seconds / 1e6 : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kpipe::apps::run_program(kpipe::ProgramName::prepare, "kpipe-prepare", [&] { return run(argc, argv); });
}
