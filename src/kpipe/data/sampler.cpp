#include "kpipe/data/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kpipe/core/rng.hpp"

namespace kpipe::data {

std::int64_t window_start(std::uint64_t seed, std::int64_t step, std::int64_t sequence, std::int64_t corpus_tokens,
                          int seq_len) {
  const std::int64_t starts = corpus_tokens - seq_len;  // every start that leaves seq_len + 1 tokens
  if (seq_len < 1 || starts < 1)
    throw std::invalid_argument(fmt::format("kpipe::data::window_start: {} tokens hold no window of {} + 1",
                                            corpus_tokens, seq_len));
  const std::uint64_t bits = rng::bits64(rng::make_key(seed, static_cast<std::uint64_t>(step),
                                                       static_cast<std::uint64_t>(sequence), "sampler"),
                                         0);
  // Modulo bias is below starts / 2^64 (< 1e-9 for any split under 18 billion tokens).
  return static_cast<std::int64_t>(bits % static_cast<std::uint64_t>(starts));
}

namespace {

// A window of seq_len + 1 tokens as inputs (its first seq_len) and targets (its last seq_len).
void split_window(const Token* window, int seq_len, Token* inputs, Token* targets) {
  std::copy_n(window, seq_len, inputs);
  std::copy_n(window + 1, seq_len, targets);
}

}  // namespace

void fill_train_windows(const TokenSplit& tokens, std::uint64_t seed, std::int64_t step, int first_sequence,
                        int sequences, int seq_len, Token* inputs, Token* targets) {
  std::vector<Token> window(std::size_t(seq_len) + 1);
  for (int s = 0; s < sequences; ++s) {
    const std::int64_t start = window_start(seed, step, first_sequence + s, tokens.size(), seq_len);
    tokens.read(start, seq_len + 1, window.data());
    split_window(window.data(), seq_len, inputs + std::int64_t(s) * seq_len, targets + std::int64_t(s) * seq_len);
  }
}

std::int64_t validation_windows(std::int64_t tokens, int seq_len) {
  if (seq_len < 1) throw std::invalid_argument("kpipe::data::validation_windows: seq_len < 1");
  return tokens / (seq_len + 1);
}

void fill_validation_windows(const TokenSplit& tokens, std::int64_t first_window, int windows, int seq_len,
                             Token* inputs, Token* targets) {
  const std::int64_t available = validation_windows(tokens.size(), seq_len);
  if (first_window < 0 || windows < 0 || first_window + windows > available)
    throw std::out_of_range(fmt::format("kpipe::data::fill_validation_windows: windows [{}, {}) of {}", first_window,
                                        first_window + windows, available));
  // Consecutive windows are one range of the split: one read.
  const std::int64_t span = seq_len + 1;
  std::vector<Token> run(std::size_t(std::int64_t(windows) * span));
  tokens.read(first_window * span, std::int64_t(windows) * span, run.data());
  for (int w = 0; w < windows; ++w)
    split_window(run.data() + w * span, seq_len, inputs + std::int64_t(w) * seq_len, targets + std::int64_t(w) * seq_len);
}

}  // namespace kpipe::data
