#include "kpipe/data/token_file.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <system_error>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/data/tokenizer_store.hpp"

namespace kpipe::data {
namespace {

constexpr const char* format_name = "kpipe-tokens";
constexpr int format_version = 2;  // 1: bytes only (uint8, no /tokenizer); 2: any tokenizer

// HDF5 through the one helper layer (h5/file.hpp).
using Handle = h5::Handle;
using QuietHdf5Errors = h5::QuietErrors;

// The smallest unsigned type that holds every id of the vocabulary (int32 beyond 16 bits).
hid_t token_file_type(int vocab) {
  using namespace h5;
  return vocab <= 256 ? file_type<std::uint8_t>() : vocab <= 65536 ? file_type<std::uint16_t>() : file_type<std::int32_t>();
}

void write_split(hid_t file, const char* name, const std::vector<Token>& tokens, int vocab, const std::string& label) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    require(tokens[i] >= 0 && tokens[i] < vocab, "{}: {} token {} at position {} is outside the vocabulary [0, {})",
            label, name, tokens[i], i, vocab);
  // Compressed in chunks; HDF5 converts the int32 ids to the file's type.
  h5::write_dataset(file, name, token_file_type(vocab), h5::memory_type<std::int32_t>(), tokens.data(),
                        {hsize_t(tokens.size())}, true);
}

std::vector<Token> read_split(hid_t file, const char* name, int vocab, const std::string& label) {
  require(h5::exists(file, name), "{}: missing dataset /{}", label, name);
  require(h5::shape(file, name).size() == 1, "{}: dataset /{} is not 1-D", label, name);
  require(h5::type_class(file, name, label) == H5T_INTEGER, "{}: dataset /{} does not hold integers", label, name);
  std::vector<Token> tokens = h5::read_int32s(file, name, label);
  // Checked here, once, so that no kernel ever indexes the embedding with an id outside the vocabulary.
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [vocab](Token t) { return t < 0 || t >= vocab; });
  require(bad == tokens.end(), "{}: dataset /{} holds token {} at position {}, outside the vocabulary [0, {})", label,
          name, bad == tokens.end() ? 0 : *bad, bad - tokens.begin(), vocab);
  return tokens;
}

}  // namespace

void write_token_file(const std::string& path, const Corpus& corpus) {
  const QuietHdf5Errors quiet;
  const std::string label = fmt::format("token file '{}'", path);
  const std::string partial = path + ".partial";
  try {
    Handle file = h5::create_file(partial);
    write_split(file.get(), "train", corpus.train, corpus.vocab(), label);
    write_split(file.get(), "validation", corpus.validation, corpus.vocab(), label);
    write_tokenizer(file.get(), corpus.tokenizer, label);
    h5::write_attribute(file.get(), "format", std::string(format_name));
    h5::write_attribute(file.get(), "version", std::int64_t(format_version));
    h5::write_attribute(file.get(), "vocab", std::int64_t(corpus.vocab()));
    h5::write_attribute(file.get(), "source", corpus.source);
    h5::close_file(file, partial);
    fsync_path(partial);  // on storage before it takes the name
  } catch (const InputError& e) {
    const std::string what = e.what();
    throw InputError(what.rfind(label, 0) == 0 ? what : fmt::format("{}: {}", label, what));
  } catch (const std::system_error& e) {
    throw InputError(fmt::format("{}: {}", label, e.what()));
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  require(!error, "{}: cannot rename {} into place ({})", label, partial, error.message());
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
  const QuietHdf5Errors quiet;
  const std::string label = label_or_empty.empty() ? fmt::format("token file '{}'", path) : label_or_empty;
  Handle file;
  try {
    file = h5::open_file(path);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", label, e.what()));
  }
  require(h5::has_attribute(file.get(), "format"), "{}: not a kpipe token file (no 'format' attribute)", label);
  const std::string format = h5::read_string_attribute(file.get(), "format", label);
  require(format == format_name, "{}: not a kpipe token file (format '{}', expected '{}')", label, format,
          format_name);
  const std::int64_t version = h5::read_int_attribute(file.get(), "version", label);
  require(version >= 1 && version <= format_version,
          "{}: version {} is not supported (this kpipe reads versions 1 to {})", label, version, format_version);
  const std::int64_t vocab = h5::read_int_attribute(file.get(), "vocab", label);

  Corpus corpus;
  corpus.tokenizer = read_tokenizer(file.get(), label);  // version 1 has none: bytes
  require(vocab == corpus.vocab(), "{}: vocab = {}, but its {} tokenizer has {}", label, vocab,
          to_string(corpus.tokenizer.kind()), corpus.vocab());
  corpus.train = read_split(file.get(), "train", corpus.vocab(), label);
  corpus.validation = read_split(file.get(), "validation", corpus.vocab(), label);
  corpus.source =
      h5::has_attribute(file.get(), "source") ? h5::read_string_attribute(file.get(), "source", label) : path;
  return corpus;
}

}  // namespace kpipe::data
