#pragma once
// The token file (written by kpipe-prepare, read by load_corpus): HDF5, so that h5dump, h5py and HDFView
// read it. Layout (version 2):
//   /train, /validation   token ids, 1-D: uint8 for a vocabulary of up to 256, uint16 up to 65536, else int32
//                         (chunked and deflate-compressed when the filter is available)
//   /tokenizer            the tokenizer that made them (data/tokenizer_store.hpp: bytes, or a BPE model)
//   attributes of /       format = "kpipe-tokens", version = 2, vocab, source = where the text came from
// Version 1 (bytes only: uint8, vocab = 256, no /tokenizer) is still read.
// The file appears under its name only when complete (written beside it, then renamed).
#include <string>

#include "kpipe/data/corpus.hpp"

namespace kpipe::data {

void write_token_file(const std::string& path, const Corpus& corpus);

// Checks the format attribute, the version, the tokenizer (its checksum), the vocabulary and both datasets,
// every id of which must lie in [0, vocab). Errors are InputErrors "<label>: <what is wrong>", where label
// defaults to "token file '<path>'".
Corpus read_token_file(const std::string& path, const std::string& label = {});

// Whether path starts with the HDF5 signature (false for unreadable files).
bool is_hdf5_file(const std::string& path);

// Whether data.path (or kpipe-eval's --data) is a token file (true) or a text file (false). A file named
// *.h5 / *.hdf5 that is not HDF5, or one whose first bytes are the HDF5 signature with a few of them
// damaged, is neither: an InputError "<label>: ..." rather than training on its bytes as text.
bool is_token_file(const std::string& path, const std::string& label);

}  // namespace kpipe::data
