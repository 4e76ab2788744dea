// kpipe-prepare: writes an HDF5 token file (bytes as tokens, train and validation splits) for
// `kpipe-train --data FILE`, from a text file or from the embedded synthetic corpus:
//   kpipe-prepare INPUT.txt -o OUT.h5 [--val-fraction 0.1]
//   kpipe-prepare --synthetic -o OUT.h5 [--tokens N] [--seed S] [--val-fraction 0.1]
// A plain program: no MPI, no Kokkos (the library's HDF5 is the parallel build, but serial file access
// needs neither).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/io/h5_file.hpp"
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
  // Written beside it and renamed over it: never over a device node, a FIFO or a directory.
  kpipe::require_writable(o.output, fmt::format("--output = {}", o.output));
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app("Writes an HDF5 token file (bytes as tokens) for kpipe-train --data.", "kpipe-prepare");
  app.add_option("input", o.input, "text file to tokenize")->type_name("INPUT.txt");
  app.add_option("-o,--output", o.output, "token file to write")->type_name("OUT.h5")->required();
  app.add_flag("--synthetic", o.synthetic, "the embedded synthetic corpus instead of a text file");
  app.add_option("--val-fraction", o.val_fraction, "share held out for validation (the end of the text)")
      ->capture_default_str();
  app.add_option("--tokens", o.tokens, "size of the synthetic corpus")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the synthetic corpus")->capture_default_str();
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
  check(o);

  using namespace kpipe::data;
  const Corpus corpus =
      o.synthetic ? synthetic_corpus(o.seed, o.tokens, o.val_fraction)
                  : text_corpus(kpipe::read_bytes(o.input, fmt::format("input '{}'", o.input)), o.val_fraction, o.input);
  write_token_file(o.output, corpus);
  const double entropy = unigram_entropy_nats(corpus.train);
  fmt::print("kpipe-prepare: wrote {}: train {} tokens, validation {} tokens, unigram entropy {:.3f} nats "
             "({:.3f} bits), source {}\n",
             o.output, corpus.train.size(), corpus.validation.size(), entropy, entropy / std::log(2.0), corpus.source);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kpipe::io::h5::skip_shutdown_at_exit();
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
