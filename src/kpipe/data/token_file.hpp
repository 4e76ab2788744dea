#pragma once
// The token file (written by kpipe-prepare, read by load_corpus): HDF5, so that h5dump, h5py and HDFView
// read it. Layout (version 2):
//   /train, /validation   token ids, 1-D: uint8 for a vocabulary of up to 256, uint16 up to 65536, else int32;
//                         chunked (64 KiB per chunk), each chunk Fletcher-32 checksummed and, where the HDF5
//                         build can, deflate-compressed
//   /tokenizer            the tokenizer that made them (data/tokenizer_store.hpp: bytes, or a BPE model)
//   attributes of /       format = "kpipe-tokens", version = 2, vocab, source = where the text came from
// Version 1 (bytes only: uint8, vocab = 256, no /tokenizer) is still read, as are contiguous or unfiltered
// datasets. The file appears under its name only when complete (data/token_file_writer.hpp).
// Reading opens the file and checks everything but the ids themselves; the splits are then read by range
// (data/token_dataset.hpp), each id checked against the vocabulary and each chunk against its checksum as
// it is read.
#include <string>

#include "kpipe/data/corpus.hpp"

namespace kpipe::data {

inline constexpr const char* token_file_format = "kpipe-tokens";
inline constexpr int token_file_version = 2;  // 1: bytes only (uint8, no /tokenizer); 2: any tokenizer

// The whole corpus, each split read in blocks (a corpus of any size).
void write_token_file(const std::string& path, const Corpus& corpus);

// Checks the format attribute, the version, the tokenizer (its checksum), the vocabulary and both datasets
// (present, 1-D, integers); the corpus's splits read the datasets by range. Errors are InputErrors
// "<label>: <what is wrong>", where label defaults to "token file '<path>'".
Corpus read_token_file(const std::string& path, const std::string& label = {});

// Whether path starts with the HDF5 signature (false for unreadable files).
bool is_hdf5_file(const std::string& path);

// Whether data.path (or kpipe-eval's --data) is a token file (true) or a text file (false). A file named
// *.h5 / *.hdf5 that is not HDF5, or one whose first bytes are the HDF5 signature with a few of them
// damaged, is neither: an InputError "<label>: ..." rather than training on its bytes as text.
bool is_token_file(const std::string& path, const std::string& label);

}  // namespace kpipe::data
