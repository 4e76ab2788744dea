#pragma once
// A tokenized corpus: bytes as tokens (vocabulary 256), split into a training part and a held-out
// validation part (the last fraction of the text). Where it comes from is DataConfig::path: empty, the
// embedded synthetic corpus (data/synthetic.hpp); an HDF5 token file (data/token_file.hpp, written by
// kpipe-prepare); anything else, a text file read as bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe::data {

inline constexpr int byte_vocab = 256;

struct Corpus {
  std::vector<Token> train, validation;
  std::string source;  // a file name, or a description of the synthetic corpus
};

// The bytes of text as tokens; the last round(size * val_fraction) bytes are the validation split.
Corpus text_corpus(const std::string& bytes, double val_fraction, std::string source);

// The corpus a run trains on (see above). Every split must hold at least seq_len + 1 tokens (one window);
// an unreadable file or a too-small split is an InputError naming data.path (or data.synthetic_tokens).
Corpus load_corpus(const DataConfig& config, std::uint64_t seed, int seq_len);

}  // namespace kpipe::data
