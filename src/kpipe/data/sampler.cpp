#include "kpipe/data/sampler.hpp"

#include <fmt/format.h>

#include <stdexcept>

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
  // Modulo bias is below starts / 2^64 (< 1e-9 for any corpus that fits in memory).
  return static_cast<std::int64_t>(bits % static_cast<std::uint64_t>(starts));
}

namespace {

void copy_window(const std::vector<Token>& tokens, std::int64_t start, int seq_len, Token* inputs, Token* targets) {
  for (int t = 0; t < seq_len; ++t) {
    inputs[t] = tokens[start + t];
    targets[t] = tokens[start + t + 1];
  }
}

}  // namespace

void fill_train_windows(const std::vector<Token>& tokens, std::uint64_t seed, std::int64_t step, int first_sequence,
                        int sequences, int seq_len, Token* inputs, Token* targets) {
  const auto corpus_tokens = static_cast<std::int64_t>(tokens.size());
  for (int s = 0; s < sequences; ++s) {
    const std::int64_t start = window_start(seed, step, first_sequence + s, corpus_tokens, seq_len);
    copy_window(tokens, start, seq_len, inputs + std::int64_t(s) * seq_len, targets + std::int64_t(s) * seq_len);
  }
}

std::int64_t validation_windows(std::int64_t tokens, int seq_len) {
  if (seq_len < 1) throw std::invalid_argument("kpipe::data::validation_windows: seq_len < 1");
  return tokens / (seq_len + 1);
}

void fill_validation_windows(const std::vector<Token>& tokens, std::int64_t first_window, int windows, int seq_len,
                             Token* inputs, Token* targets) {
  const std::int64_t available = validation_windows(static_cast<std::int64_t>(tokens.size()), seq_len);
  if (first_window < 0 || windows < 0 || first_window + windows > available)
    throw std::out_of_range(fmt::format("kpipe::data::fill_validation_windows: windows [{}, {}) of {}", first_window,
                                        first_window + windows, available));
  for (int w = 0; w < windows; ++w)
    copy_window(tokens, (first_window + w) * (seq_len + 1), seq_len, inputs + std::int64_t(w) * seq_len,
                targets + std::int64_t(w) * seq_len);
}

}  // namespace kpipe::data
