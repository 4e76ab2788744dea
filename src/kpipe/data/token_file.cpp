#include "kpipe/data/token_file.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/plural.hpp"
#include "kpipe/data/token_dataset.hpp"
#include "kpipe/data/token_file_writer.hpp"
#include "kpipe/data/tokenizer_store.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::data {
namespace {

// The split's dataset, checked (present, 1-D, integers, its data written) but not read: its length.
std::int64_t split_length(hid_t file, const char* name, const std::string& label) {
  require(h5::exists(file, name), "{}: missing dataset /{}", label, name);
  const std::vector<hsize_t> shape = h5::shape(file, name);
  require(shape.size() == 1, "{}: dataset /{} is not 1-D", label, name);
  require(h5::type_class(file, name, label) == H5T_INTEGER, "{}: dataset /{} does not hold integers", label, name);
  // Refused like a truncated file: HDF5 would read the tokens never written as 0s, without a word.
  const h5::WrittenStorage storage = h5::written_storage(h5::open_dataset(file, name, label).get());
  require(storage.complete(), "{}: /{} claims {} but {} of its {} were never written (incomplete file)", label, name,
          quantity(std::int64_t(shape[0]), "token"), storage.spanned - storage.written,
          quantity(std::int64_t(storage.spanned), "storage chunk"));
  return std::int64_t(shape[0]);
}

}  // namespace

void write_token_file(const std::string& path, const Corpus& corpus) {
  TokenFileWriter writer(path, corpus.tokenizer, corpus.source);
  constexpr std::int64_t block = 1 << 20;
  std::vector<Token> ids;
  for (const Split split : {Split::train, Split::validation}) {
    const TokenSplit& tokens = split == Split::train ? corpus.train : corpus.validation;
    for (std::int64_t first = 0; first < tokens.size(); first += block) {
      ids.resize(std::size_t(std::min(block, tokens.size() - first)));
      tokens.read(first, std::int64_t(ids.size()), ids.data());
      writer.append(split, ids.data(), ids.size());
    }
  }
  writer.commit();
}

bool is_hdf5_file(const std::string& path) {
  return h5::is_hdf5_file(path);
}

bool is_token_file(const std::string& path, const std::string& label) {
  if (is_hdf5_file(path)) return true;
  if (!unreadable_reason(path).empty()) return false;  // the caller's read names the reason
  // The signature HDF5 looks for at offset 0 (or 512, 1024, ... after a user block).
  static const unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const std::string head = read_bytes(path, label, 8);
  int same = 0;
  for (std::size_t i = 0; i < head.size(); ++i) same += static_cast<unsigned char>(head[i]) == signature[i] ? 1 : 0;
  require(same < 5, "{}: starts like an HDF5 token file, but its 8-byte signature has {} wrong (a damaged file?): "
          "refusing to train on it as text", label, 8 - same);
  const std::string extension = std::filesystem::path(path).extension().string();
  require(extension != ".h5" && extension != ".hdf5" && extension != ".hdf",
          "{}: named like an HDF5 token file ({}) but not an HDF5 file (damaged?): refusing to train on it as text; "
          "a text file should not end in {}", label, extension, extension);
  return false;
}

Corpus read_token_file(const std::string& path, const std::string& label_or_empty) {
  const h5::QuietErrors quiet;
  const std::string label = label_or_empty.empty() ? fmt::format("token file '{}'", path) : label_or_empty;
  h5::Handle file;
  try {
    file = h5::open_file(path);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", label, e.what()));
  }
  require(h5::has_attribute(file.get(), "format"), "{}: not a kpipe token file (no 'format' attribute)", label);
  const std::string format = h5::read_string_attribute(file.get(), "format", label);
  require(format == token_file_format, "{}: not a kpipe token file (format '{}', expected '{}')", label, format,
          token_file_format);
  const std::int64_t version = h5::read_int_attribute(file.get(), "version", label);
  require(version >= 1 && version <= token_file_version,
          "{}: version {} is not supported (this kpipe reads versions 1 to {})", label, version, token_file_version);
  const std::int64_t vocab = h5::read_int_attribute(file.get(), "vocab", label);

  Corpus corpus;
  corpus.tokenizer = read_tokenizer(file.get(), label);  // version 1 has none: bytes
  require(vocab == corpus.vocab(), "{}: vocab = {}, but its {} tokenizer has {}", label, vocab,
          to_string(corpus.tokenizer.kind()), corpus.vocab());
  const std::int64_t train = split_length(file.get(), "train", label);
  const std::int64_t validation = split_length(file.get(), "validation", label);
  corpus.train = TokenSplit(token_dataset(path, "train", train, corpus.vocab(), label));
  corpus.validation = TokenSplit(token_dataset(path, "validation", validation, corpus.vocab(), label));
  corpus.source =
      h5::has_attribute(file.get(), "source") ? h5::read_string_attribute(file.get(), "source", label) : path;
  return corpus;
}

}  // namespace kpipe::data
