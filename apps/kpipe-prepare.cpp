// kpipe-prepare: writes an HDF5 token file (train and validation splits, and the tokenizer that made them)
// for `kpipe-train --data FILE`, from a text file or from the embedded synthetic corpus:
//   kpipe-prepare INPUT.txt -o OUT.h5 [--val-fraction 0.1]                       bytes as tokens
//   kpipe-prepare INPUT.txt -o OUT.h5 --tokenizer bpe --vocab-size 8192         a BPE model trained on INPUT
//   kpipe-prepare --synthetic -o OUT.h5 [--tokens N] [--seed S] [--val-fraction 0.1]
// The BPE model is trained on the training split only (the held-out end of the text stays unseen).
// A plain program: no MPI, no Kokkos (the library's HDF5 is the parallel build, but serial file access
// needs neither).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/data/entropy.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/token_file.hpp"

namespace {

struct Options {
  std::string input, output;
  bool synthetic = false;
  double val_fraction = kpipe::DataConfig{}.val_fraction;
  std::int64_t tokens = kpipe::DataConfig{}.synthetic_tokens;
  std::uint64_t seed = kpipe::TrainConfig{}.seed;
  bool tokens_given = false, seed_given = false;
  std::string tokenizer = "bytes";
  int vocab_size = kpipe::data::BpeOptions{}.vocab_size;
  bool vocab_size_given = false;
};

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  return std::filesystem::exists(b, error) && std::filesystem::equivalent(a, b, error);
}

void check(const Options& o) {
  using kpipe::require;
  require(o.synthetic || !o.input.empty(), "give a text file to tokenize, or --synthetic");
  require(!(o.synthetic && !o.input.empty()), "give a text file or --synthetic, not both (got '{}')", o.input);
  require(o.synthetic || (!o.tokens_given && !o.seed_given), "--tokens and --seed need --synthetic");
  require(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction = {}: expected a number in (0, 1)",
          o.val_fraction);
  require(o.tokens >= 1, "--tokens = {}: expected a positive integer", o.tokens);
  require(o.synthetic || !same_file(o.input, o.output), "--output = {} is the input file", o.output);
  require(o.tokenizer == "bytes" || o.tokenizer == "bpe", "--tokenizer = {}: expected bytes or bpe", o.tokenizer);
  require(o.tokenizer == "bpe" || !o.vocab_size_given, "--vocab-size needs --tokenizer bpe (bytes have 256)");
  require(o.tokenizer == "bytes" || !o.synthetic, "--tokenizer bpe: the synthetic corpus is bytes (give a text file)");
  require(o.tokenizer == "bytes" || kpipe::data::sentencepiece_available(),
          "--tokenizer bpe: this kpipe was built without SentencePiece (KPIPE_ENABLE_SENTENCEPIECE)");
  // Written beside it and renamed over it: never over a device node, a FIFO or a directory.
  kpipe::require_writable(o.output, fmt::format("--output = {}", o.output));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The text's held-out end is cut by bytes before BPE training, so the tokenizer never sees it; the token
// split then follows the same place in the text.
kpipe::data::Corpus bpe_corpus(const std::string& text, const Options& o) {
  using namespace kpipe::data;
  const auto held_out = std::llround(double(text.size()) * o.val_fraction);
  const std::string train_text = text.substr(0, text.size() - std::size_t(held_out));
  if (const auto invalid = invalid_utf8_sequences(text); invalid > 0)
    fmt::print(stderr, "kpipe-prepare: warning: {} has {} bytes that are not valid UTF-8; BPE turns each into "
               "U+FFFD (use --tokenizer bytes to keep them)\n", o.input, invalid);
  const auto start = std::chrono::steady_clock::now();
  BpeOptions options;
  options.vocab_size = o.vocab_size;
  const Tokenizer tokenizer = train_bpe(train_text, options);
  fmt::print("kpipe-prepare: BPE model trained on {} bytes in {:.1f} s: vocabulary {}{}\n", train_text.size(),
             seconds_since(start), tokenizer.vocab(),
             tokenizer.vocab() < o.vocab_size
                 ? fmt::format(" (asked {}: the text has too few distinct pieces for more)", o.vocab_size)
                 : "");
  Corpus corpus;
  corpus.tokenizer = tokenizer;
  corpus.source = o.input;
  corpus.train = tokenizer.encode(train_text);
  corpus.validation = tokenizer.encode(text.substr(train_text.size()));
  return corpus;
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app("Writes an HDF5 token file (bytes as tokens, or a BPE model's) for kpipe-train --data.",
               "kpipe-prepare");
  app.add_option("input", o.input, "text file to tokenize")->type_name("INPUT.txt");
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
  check(o);

  using namespace kpipe::data;
  Corpus corpus;
  std::size_t bytes = 0;
  if (o.synthetic) {
    corpus = synthetic_corpus(o.seed, o.tokens, o.val_fraction);
    bytes = corpus.train.size() + corpus.validation.size();
  } else {
    const std::string text = kpipe::read_bytes(o.input, fmt::format("input '{}'", o.input));
    bytes = text.size();
    corpus = o.tokenizer == "bpe" ? bpe_corpus(text, o) : text_corpus(text, o.val_fraction, o.input);
  }
  write_token_file(o.output, corpus);
  const double entropy = unigram_entropy_nats(corpus.train.read_all());
  const std::size_t tokens = corpus.train.size() + corpus.validation.size();
  fmt::print("kpipe-prepare: wrote {}: {} tokenizer, vocabulary {}, train {} tokens, validation {} tokens "
             "({:.2f} bytes per token), unigram entropy {:.3f} nats ({:.3f} bits) per token, source {}\n",
             o.output, to_string(corpus.tokenizer.kind()), corpus.vocab(), corpus.train.size(),
             corpus.validation.size(), tokens > 0 ? double(bytes) / double(tokens) : 0.0, entropy,
             entropy / std::log(2.0), corpus.source);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kpipe::h5::skip_shutdown_at_exit();
  try {
    return run(argc, argv);
  } catch (const kpipe::InputError& error) {
    std::fprintf(stderr, "kpipe-prepare: error: %s\n", error.what());
    return kpipe::exit_bad_input;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kpipe-prepare: internal error: %s\n", error.what());
    return 1;
  }
}
