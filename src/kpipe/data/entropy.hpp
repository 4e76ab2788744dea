#pragma once
// Entropies of a token sequence in nats (the unit of the training loss). A model that learned only how
// often each token occurs reaches the unigram entropy; one that also learned which token follows which
// reaches the bigram conditional entropy; a model that learned real structure goes below both.
#include <cstdint>
#include <vector>

#include "kpipe/core/tensor.hpp"

namespace kpipe::data {

// H(X) of the token frequencies (any vocabulary); 0 for an empty sequence.
double unigram_entropy_nats(const std::vector<Token>& tokens);

// H(X) of the distribution that `counts` (occurrences per id) describe; 0 when they are all 0. For a
// corpus counted piece by piece (kpipe-prepare).
double entropy_of_counts_nats(const std::vector<std::int64_t>& counts);

// H(X[t+1] | X[t]) over consecutive pairs; 0 for fewer than two tokens.
double bigram_conditional_entropy_nats(const std::vector<Token>& tokens);

}  // namespace kpipe::data
