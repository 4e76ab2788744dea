#pragma once
// Choosing the next token from the model's logits. A pure function of (logits, allowed ids, options,
// position): the uniform number comes from Philox keyed by (seed, position), so the same logits give the
// same token on any rank and any pipeline layout (the logits themselves are bit-identical across layouts,
// docs/architecture.md, property 1).
#include <cstdint>
#include <vector>

#include "kpipe/core/tensor.hpp"

namespace kpipe::runtime {

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy (the largest logit, the lowest id among equals)
  int top_k = 40;            // sample among the k most likely allowed ids; 0: among all of them
  std::uint64_t seed = 1234;
};

// Checks temperature >= 0 and finite, top_k >= 0 (InputError naming --temperature / --top-k).
void validate(const SamplingOptions& options);

// The next token given one row of logits (size >= 1) and which ids may be generated (same size; at least
// one true): softmax(logits / temperature) over the allowed ids among the top_k largest (ties: lower ids
// first), then the first id whose cumulative probability reaches u in (0, 1], in decreasing order of
// probability. Computed in double.
Token sample_token(const std::vector<double>& logits, const std::vector<bool>& allowed, const SamplingOptions& options,
                   std::int64_t position);

}  // namespace kpipe::runtime
