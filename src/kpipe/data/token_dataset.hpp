#pragma once
// The tokens of one split of a token file (a 1-D integer dataset, data/token_file.hpp), read by HDF5
// hyperslab: a range reads, decompresses and checksums only the chunks that hold it, and the stored ids
// (uint8, uint16 or int32) are widened to Token for that range alone. The file is opened on the first read
// and stays open (HDF5 keeps recently read chunks in its 1 MiB chunk cache).
#include <cstdint>
#include <memory>
#include <string>

#include "kpipe/data/token_split.hpp"

namespace kpipe::data {

// The dataset `dataset` of the token file `path`, of `tokens` tokens (its length, checked when the file
// was opened). Every id read must lie in [0, vocab). Errors are InputErrors "<label>: ..." naming the split,
// the tokens and, for a damaged chunk, the chunk and the tokens it holds.
std::shared_ptr<const TokenSource> token_dataset(std::string path, std::string dataset, std::int64_t tokens, int vocab,
                                                 std::string label);

}  // namespace kpipe::data
