#pragma once
// A text file's bytes as tokens (the bytes tokenizer: byte b is token b), read at the range asked: a text
// file of any size serves as data.path without being held in memory, and only the ranks that read tokens
// open it (on their first read).
#include <cstdint>
#include <memory>
#include <string>

#include "kpipe/data/token_split.hpp"

namespace kpipe::data {

// The file `path`, of `bytes` bytes (its size when it was checked). A read that comes up short (the file
// shrank since) or fails is an InputError "<label>: ..." naming the bytes.
std::shared_ptr<const TokenSource> text_bytes(std::string path, std::int64_t bytes, std::string label);

}  // namespace kpipe::data
