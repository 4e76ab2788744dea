#pragma once
// A split of a corpus (its training or its validation tokens), wherever the tokens are: in memory (the
// synthetic corpus, a text encoded on the fly), in a token file's dataset (data/token_dataset.hpp: read by
// HDF5 hyperslabs) or in a text file's bytes (data/text_bytes.hpp: read at offsets). A split is read by
// ranges, so a training step reads only its windows and memory does not grow with the corpus; a file is
// opened on its first read, so a rank that never reads (a middle pipeline stage) never opens it. Copies
// and slices share the source.
#include <cstdint>
#include <memory>
#include <vector>

#include "kpipe/core/tensor.hpp"

namespace kpipe::data {

// Where a split's tokens come from: size() of them, read by range.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::int64_t size() const = 0;
  // Tokens [first, first + count) into out (the caller keeps the range inside [0, size())). A file that
  // cannot be read there, or holds an id outside the vocabulary there, is an InputError naming the file and
  // the tokens.
  virtual void read(std::int64_t first, std::int64_t count, Token* out) const = 0;
};

class TokenSplit {
 public:
  TokenSplit() = default;  // no tokens
  TokenSplit(std::vector<Token> tokens);  // NOLINT(google-explicit-constructor): held in memory
  explicit TokenSplit(std::shared_ptr<const TokenSource> source);

  std::int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Tokens [first, first + count) into out; std::out_of_range outside the split; InputError as TokenSource.
  void read(std::int64_t first, std::int64_t count, Token* out) const;
  // Every token (for small splits: tests, a corpus written back whole).
  std::vector<Token> read_all() const;
  // Tokens [first, first + count) of this split, sharing its source.
  TokenSplit slice(std::int64_t first, std::int64_t count) const;

 private:
  std::shared_ptr<const TokenSource> source_;
  std::int64_t first_ = 0, size_ = 0;
};

// `front`'s tokens followed by `back`'s (kpipe-eval's --split all: train, then validation).
TokenSplit concatenate(const TokenSplit& front, const TokenSplit& back);

// Reads every token once, in blocks of bounded size, for the checks alone: a damaged chunk or an id
// outside the vocabulary is an InputError now, before any work, rather than midway (kpipe-eval, which
// reads every window of its range anyway).
void check_readable(const TokenSplit& tokens);

}  // namespace kpipe::data
