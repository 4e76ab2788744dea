#pragma once
// A text of any size encoded into a token file in bounded memory, on every core: the text is read in
// batches (EncodeOptions::batch_bytes, 32 MiB), each cut into one block per thread and encoded by the threads
// at once while the previous batch is compressed (on the threads too) and written; at most two batches are
// held. With a BPE tokenizer batches and blocks
// end at a newline, so the ids are those of encoding each split whole (no piece spans a newline); a line
// longer than a batch is cut at a UTF-8 character boundary.
#include <cstdint>
#include <functional>
#include <vector>

#include "kpipe/data/text_inputs.hpp"
#include "kpipe/data/token_file_writer.hpp"
#include "kpipe/data/tokenizer.hpp"

namespace kpipe::data {

struct EncodeOptions {
  int threads = 0;                      // 0: the machine's cores
  std::int64_t batch_bytes = 32 << 20;  // text read at once (the memory bound: about twice this, and the ids)
};

struct EncodeSummary {
  std::vector<std::int64_t> train_counts;  // occurrences of each id in the training split (for its entropy)
  std::int64_t invalid_utf8 = 0;           // BPE: bytes that are not valid UTF-8 (each became U+FFFD)
};

// Bytes [0, train_bytes) of the text into the writer's train split, the rest into its validation split.
// `progress` is called with the bytes done after each batch is written.
EncodeSummary encode_text(const TextStream& text, std::int64_t train_bytes, const Tokenizer& tokenizer,
                          TokenFileWriter& writer, const EncodeOptions& options,
                          const std::function<void(std::int64_t bytes_done)>& progress);

}  // namespace kpipe::data
