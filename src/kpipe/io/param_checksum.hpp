#pragma once
// A checkpoint's param_checksum, as kpipe-train's final metrics give it for the model it trained: XXH64 over the
// XXH64 hashes of /model's tensors in global layer order, read from the manifest (no tensor is read); a file of
// format_version 2, whose manifest has FNV-1a hashes, has its tensors read and hashed.
#include <cstdint>

namespace kpipe::io {

class CheckpointReader;

std::uint64_t param_checksum(const CheckpointReader& reader);

}  // namespace kpipe::io
