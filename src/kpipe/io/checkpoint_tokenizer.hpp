#pragma once
// The run's tokenizer inside a checkpoint, in the token files' layout (data/tokenizer_store.hpp) through the
// checkpoint file API, so the model blob is checked against the checkpoint's manifest.
#include <string>

#include "kpipe/data/tokenizer.hpp"

namespace kpipe::io {

class CheckpointWriter;
class CheckpointReader;

// /tokenizer's attributes (every rank passes them) and, from the rank that has `owner` true,
// /tokenizer/model as a blob under the manifest.
void add_tokenizer(CheckpointWriter& writer, const data::Tokenizer& tokenizer, bool owner);
data::Tokenizer read_tokenizer(const CheckpointReader& reader);

// The tokenizer of a checkpoint (a step-<N>.h5 file, or a checkpoint.dir).
data::Tokenizer read_checkpoint_tokenizer(const std::string& path);

}  // namespace kpipe::io
