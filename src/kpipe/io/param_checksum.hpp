#pragma once
// A checkpoint's param_checksum, as kpipe-train's final metrics give it for the model it trained: FNV-1a over the
// hashes of /model's tensors in global layer order, read from the manifest (no tensor is read).
#include <cstdint>

namespace kpipe::io {

class CheckpointReader;

std::uint64_t param_checksum(const CheckpointReader& reader);

}  // namespace kpipe::io
