#pragma once
// What BPE trains on when the training text is large: SentencePiece holds its training text, and more, in
// memory, so kpipe-prepare trains it on a bounded sample (--sample-bytes) and then encodes the whole text
// with the model. The sample is pieces of whole lines spread evenly over the text, in order: beginning,
// middle and end alike, deterministic.
#include <cstdint>
#include <string>

#include "kpipe/data/text_inputs.hpp"

namespace kpipe::data {

// Bytes [0, end) of the text when they number at most sample_bytes; otherwise at least 16 pieces of at most
// 1 MiB at evenly spaced offsets (the first at the text's start, the last at its end), each trimmed to
// whole lines (a piece inside one long line is kept as it is), about sample_bytes in all.
std::string bpe_sample(const TextStream& text, std::int64_t end, std::int64_t sample_bytes);

}  // namespace kpipe::data
