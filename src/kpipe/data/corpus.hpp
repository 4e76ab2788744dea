#pragma once
// A tokenized corpus, split into a training part and a held-out validation part (the last fraction of the
// text), with the tokenizer that made it (data/tokenizer.hpp: bytes, or a BPE model). Where it comes from
// is DataConfig::path: empty, the embedded synthetic corpus (data/synthetic.hpp, bytes); an HDF5 token file
// (data/token_file.hpp, written by kpipe-prepare, with its tokenizer); anything else, a text file whose
// bytes are the tokens. The splits of a file are read by range as training samples them (data/token_split.hpp):
// a corpus of any size takes no memory beyond the windows read; the synthetic corpus is held in memory.
#include <cstdint>
#include <string>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/data/token_split.hpp"
#include "kpipe/data/tokenizer.hpp"

namespace kpipe::data {

struct Corpus {
  TokenSplit train, validation;  // ids in [0, tokenizer.vocab())
  std::string source;  // a file name, or a description of the synthetic corpus
  Tokenizer tokenizer;  // bytes unless the token file says otherwise
  int vocab() const { return tokenizer.vocab(); }
};

// How many of `tokens` the validation split holds, the last of them: round(tokens * val_fraction).
std::int64_t held_out(std::int64_t tokens, double val_fraction);

// The bytes of text as tokens; the last round(size * val_fraction) bytes are the validation split.
Corpus text_corpus(const std::string& bytes, double val_fraction, std::string source);

// The text encoded by `tokenizer`, split the same way by tokens (the held-out part is the text's end).
Corpus encoded_corpus(const std::string& text, const Tokenizer& tokenizer, double val_fraction, std::string source);

// A text file's bytes as tokens, read by range (never held whole), split like text_corpus; `label` names
// the file in errors.
Corpus text_file_corpus(const std::string& path, double val_fraction, const std::string& label);

// The corpus a run trains on (see above). Every split must hold at least seq_len + 1 tokens (one window);
// an unreadable file or a too-small split is an InputError naming data.path (or data.synthetic_tokens).
// A file is opened and checked here (a token file's attributes, tokenizer and datasets), its tokens are not
// read: a damaged chunk is an InputError when a window that holds it is read.
Corpus load_corpus(const DataConfig& config, std::uint64_t seed, int seq_len);

// The same corpus in the tokens of `tokenizer` (checkpoint.init_from's): a token file must have been made by it;
// a text file, or the synthetic text, is encoded with it, in memory (kpipe-eval does the same).
Corpus load_corpus(const DataConfig& config, std::uint64_t seed, int seq_len, const Tokenizer& tokenizer);

// The model's vocabulary follows the data: model.vocab is raised to the corpus's (a BPE token file's, say);
// a larger model.vocab stays (a padded vocabulary: the extra ids never occur and are never generated).
void fit_vocabulary(ModelConfig& model, const Corpus& corpus);

}  // namespace kpipe::data
