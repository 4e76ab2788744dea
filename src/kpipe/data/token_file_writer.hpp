#pragma once
// A token file (data/token_file.hpp) written piece by piece, so that a corpus larger than memory can be
// encoded into one: each split is an extendible, chunked, checksummed dataset at the vocabulary's narrowest
// width (uint8, uint16 or int32), appended to as the text is encoded. Whole chunks are compressed on several
// threads at once and written as stored (h5/stored_chunks.hpp), less than a chunk waits for more; the
// tokenizer and the attributes go in at the end. The file is written as <path>.partial and takes its name
// in commit(); a writer destroyed without commit() (an error on the way) removes the partial file, so no
// half-written file is ever left.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/tensor.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/h5/stored_chunks.hpp"

namespace kpipe::data {

enum class Split { train, validation };
const char* to_string(Split split);  // "train", "validation": the dataset's name

class TokenFileWriter {
 public:
  // Creates <path>.partial holding both splits, empty; `threads` compress (0: the machine's cores). Errors
  // are InputErrors "token file '<path>': ...".
  TokenFileWriter(const std::string& path, Tokenizer tokenizer, std::string source, int threads = 0);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  int vocab() const { return tokenizer_.vocab(); }
  std::int64_t tokens(Split split) const { return splits_[std::size_t(split)].tokens; }

  // Appends ids (each in [0, vocab): an InputError naming the first that is not) to the split's end.
  void append(Split split, const Token* ids, std::size_t count);
  // Appends bytes as ids (byte b is id b), stored as they are: the bytes tokenizer's text. Needs a
  // vocabulary of 256.
  void append_bytes(Split split, const char* bytes, std::size_t count);

  // The last chunks, the tokenizer and the attributes, then flushed to storage and renamed into place.
  void commit();

 private:
  struct SplitData {
    h5::Handle dataset;
    std::vector<unsigned char> pending;  // stored bytes not yet written (less than a chunk between appends)
    std::int64_t tokens = 0;
    hsize_t chunks_written = 0;
  };
  // The pending whole chunks, compressed on the threads and written in order; `last`: the remainder too,
  // as a final chunk padded with zeros (the dataset's length ends before the padding).
  void write_chunks(SplitData& split, bool last);

  std::string path_, partial_, label_, source_;
  Tokenizer tokenizer_;
  int threads_;
  h5::ChunkFilters filters_;
  std::size_t element_size_ = 1;
  hsize_t chunk_length_ = 1;
  h5::Handle file_;
  std::array<SplitData, 2> splits_;
  bool committed_ = false;
};

}  // namespace kpipe::data
