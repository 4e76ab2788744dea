#pragma once
// A token file (data/token_file.hpp) written piece by piece, so that a corpus larger than memory can be
// encoded into one: each split is an extendible, chunked, checksummed dataset at the vocabulary's narrowest
// width (uint8, uint16 or int32), appended to as the text is encoded; the tokenizer and the attributes go
// in at the end. The file is written as <path>.partial and takes its name in commit(); a writer destroyed
// without commit() (an error on the way) removes the partial file, so no half-written file is ever left.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kpipe/core/tensor.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::data {

enum class Split { train, validation };
const char* to_string(Split split);  // "train", "validation": the dataset's name

class TokenFileWriter {
 public:
  // Creates <path>.partial holding both splits, empty. Errors are InputErrors "token file '<path>': ...".
  TokenFileWriter(const std::string& path, Tokenizer tokenizer, std::string source);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  int vocab() const { return tokenizer_.vocab(); }
  std::int64_t tokens(Split split) const { return tokens_[std::size_t(split)]; }

  // Appends ids (each in [0, vocab): an InputError naming the first that is not) to the split's end.
  void append(Split split, const Token* ids, std::size_t count);
  // Appends bytes as ids (byte b is id b), stored as they are: the bytes tokenizer's text. Needs a
  // vocabulary of 256.
  void append_bytes(Split split, const char* bytes, std::size_t count);

  // The tokenizer and the attributes, then flushed to storage and renamed into place.
  void commit();

 private:
  std::string path_, partial_, label_, source_;
  Tokenizer tokenizer_;
  h5::Handle file_;
  std::array<std::int64_t, 2> tokens_{};
  bool committed_ = false;
};

}  // namespace kpipe::data
