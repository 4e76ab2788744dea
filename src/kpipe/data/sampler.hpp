#pragma once
// Which tokens a step trains on. A training window is seq_len + 1 consecutive tokens (inputs are the first
// seq_len, targets the same shifted by one); its start is a pure function of (seed, step, sequence index
// within the mini-batch), so the same mini-batch is drawn whatever the number of micro-batches, stages or
// replicas, and a run resumed at any step draws what the uninterrupted run would have drawn.
// Validation uses consecutive, non-overlapping windows of seq_len + 1 tokens: window w covers tokens
// [w * (seq_len + 1), (w + 1) * (seq_len + 1)); the tail shorter than a window is unused.
// Only the windows are read from the split (data/token_split.hpp): one range per training window, one range
// for a run of validation windows.
#include <cstdint>

#include "kpipe/core/tensor.hpp"
#include "kpipe/data/token_split.hpp"

namespace kpipe::data {

// Uniform in [0, corpus_tokens - seq_len - 1]; requires corpus_tokens >= seq_len + 1.
std::int64_t window_start(std::uint64_t seed, std::int64_t step, std::int64_t sequence, std::int64_t corpus_tokens,
                          int seq_len);

// Sequences first_sequence .. first_sequence + sequences - 1 of step's mini-batch, into host buffers of
// sequences * seq_len tokens: inputs[s * seq_len + t] = tokens[start + t], targets[...] = tokens[start + t + 1].
void fill_train_windows(const TokenSplit& tokens, std::uint64_t seed, std::int64_t step, int first_sequence,
                        int sequences, int seq_len, Token* inputs, Token* targets);

// How many validation windows `tokens` tokens hold: tokens / (seq_len + 1).
std::int64_t validation_windows(std::int64_t tokens, int seq_len);

// Validation windows first_window .. first_window + windows - 1, laid out like fill_train_windows.
void fill_validation_windows(const TokenSplit& tokens, std::int64_t first_window, int windows, int seq_len,
                             Token* inputs, Token* targets);

}  // namespace kpipe::data
