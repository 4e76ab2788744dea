#pragma once
// A tokenizer inside an HDF5 file (token files and checkpoints alike), self-contained and verified:
//   /tokenizer         group; attributes kind = "bytes" | "sentencepiece", vocab (int64)
//   /tokenizer/model   uint8 [n]: the serialized SentencePiece model (sentencepiece only), with attribute
//                      fnv1a64 (uint64), the FNV-1a 64 hash of its bytes, checked on reading
// A file without /tokenizer (written before kpipe had tokenizers) holds byte tokens.
#include <hdf5.h>

#include <string>

#include "kpipe/data/tokenizer.hpp"

namespace kpipe::io {

inline constexpr const char* tokenizer_group = "tokenizer";

class CheckpointWriter;
class CheckpointReader;

// In a token file. `label` names the file in errors (InputError).
void write_tokenizer(hid_t file, const data::Tokenizer& tokenizer, const std::string& label);
data::Tokenizer read_tokenizer(hid_t file, const std::string& label);

// In a checkpoint, the same layout through the checkpoint file API: /tokenizer's attributes (every rank
// passes them) and, from the rank that has `owner` true, /tokenizer/model as a blob under the manifest.
void add_tokenizer(CheckpointWriter& writer, const data::Tokenizer& tokenizer, bool owner);
data::Tokenizer read_tokenizer(const CheckpointReader& reader);

// The tokenizer of a checkpoint (a step-<N>.h5 file, or a checkpoint.dir).
data::Tokenizer read_checkpoint_tokenizer(const std::string& path);

}  // namespace kpipe::io
