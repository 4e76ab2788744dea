#pragma once
// A tokenizer inside an HDF5 file (token files and checkpoints alike), self-contained and verified:
//   /tokenizer         group; attributes kind = "bytes" | "sentencepiece" | "byte_level_bpe", vocab (int64)
//   /tokenizer/model   uint8 [n]: the serialized SentencePiece model, or byte_level_bpe's tokenizer.json, with attribute
//                      fnv1a64 (uint64), the FNV-1a 64 hash of its bytes, checked on reading
// A file without /tokenizer (written before kpipe had tokenizers) holds byte tokens. Checkpoints keep the
// same layout through their own file API (io/checkpoint_tokenizer.hpp).
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>

#include "kpipe/data/tokenizer.hpp"

namespace kpipe::data {

inline constexpr const char* tokenizer_group = "tokenizer";
inline constexpr const char* tokenizer_model_dataset = "tokenizer/model";

// In a token file. `label` names the file in errors (InputError).
void write_tokenizer(hid_t file, const Tokenizer& tokenizer, const std::string& label);
Tokenizer read_tokenizer(hid_t file, const std::string& label);

// The tokenizer that /tokenizer's attributes (kind, vocab) describe, checked: bytes, or a SentencePiece model
// whose bytes `model` reads (verified by the caller's store). InputError "<label>: ..." on a mismatch.
Tokenizer stored_tokenizer(const std::string& kind, std::int64_t vocab, const std::function<std::string()>& model,
                           const std::string& label);

}  // namespace kpipe::data
