#include "kpipe/data/token_file.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/io/h5_file.hpp"
#include "kpipe/io/tokenizer_store.hpp"

namespace kpipe::data {
namespace {

constexpr const char* format_name = "kpipe-tokens";
constexpr int format_version = 2;  // 1: bytes only (uint8, no /tokenizer); 2: any tokenizer
constexpr hsize_t chunk_tokens = 1 << 16;

// HDF5 handles that close themselves, and silence for HDF5's own error printing (io/h5_file.hpp).
using Handle = io::h5::Handle;
using QuietHdf5Errors = io::h5::QuietErrors;

void write_string_attribute(hid_t object, const char* name, const std::string& value, const std::string& label) {
  const Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<std::size_t>(value.size(), 1));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  require(attribute.valid() && H5Awrite(attribute.get(), type.get(), padded.data()) >= 0,
          "{}: cannot write attribute '{}'", label, name);
}

void write_int_attribute(hid_t object, const char* name, int value, const std::string& label) {
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attribute(H5Acreate2(object, name, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  require(attribute.valid() && H5Awrite(attribute.get(), H5T_NATIVE_INT, &value) >= 0,
          "{}: cannot write attribute '{}'", label, name);
}

// The smallest unsigned type that holds every id of the vocabulary (int32 beyond 16 bits).
hid_t token_file_type(int vocab) {
  return vocab <= 256 ? H5T_STD_U8LE : vocab <= 65536 ? H5T_STD_U16LE : H5T_STD_I32LE;
}

void write_split(hid_t file, const char* name, const std::vector<Token>& tokens, int vocab, const std::string& label) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    require(tokens[i] >= 0 && tokens[i] < vocab, "{}: {} token {} at position {} is outside the vocabulary [0, {})",
            label, name, tokens[i], i, vocab);
  const hsize_t size = tokens.size();
  const Handle space(H5Screate_simple(1, &size, nullptr), H5Sclose);
  const Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (size > 0) {  // a chunk may not exceed a fixed-size dataset, and an empty one needs none
    const hsize_t chunk = std::min(size, chunk_tokens);
    H5Pset_chunk(properties.get(), 1, &chunk);
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) H5Pset_deflate(properties.get(), 6);
  }
  const Handle dataset(
      H5Dcreate2(file, name, token_file_type(vocab), space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT),
      H5Dclose);
  require(dataset.valid(), "{}: cannot create dataset /{}", label, name);
  if (size > 0)  // HDF5 converts the int32 ids to the file's type
    require(H5Dwrite(dataset.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()) >= 0,
            "{}: cannot write dataset /{}", label, name);
}

std::string read_string_attribute(hid_t object, const char* name, const std::string& label) {
  const Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  require(attribute.valid(), "{}: cannot read attribute '{}'", label, name);
  const Handle type(H5Aget_type(attribute.get()), H5Tclose);
  require(H5Tget_class(type.get()) == H5T_STRING, "{}: attribute '{}' is not a string", label, name);
  if (H5Tis_variable_str(type.get()) > 0) {  // as h5py writes them
    char* text = nullptr;
    const Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memory.get(), H5T_VARIABLE);
    require(H5Aread(attribute.get(), memory.get(), &text) >= 0, "{}: cannot read attribute '{}'", label, name);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::vector<char> buffer(H5Tget_size(type.get()) + 1, '\0');
  require(H5Aread(attribute.get(), type.get(), buffer.data()) >= 0, "{}: cannot read attribute '{}'", label, name);
  return std::string(buffer.data());  // up to the first NUL: drops padding
}

long long read_int_attribute(hid_t object, const char* name, const std::string& label) {
  const Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  require(attribute.valid(), "{}: cannot read attribute '{}'", label, name);
  const Handle type(H5Aget_type(attribute.get()), H5Tclose);
  require(H5Tget_class(type.get()) == H5T_INTEGER, "{}: attribute '{}' is not an integer", label, name);
  long long value = 0;
  require(H5Aread(attribute.get(), H5T_NATIVE_LLONG, &value) >= 0, "{}: cannot read attribute '{}'", label, name);
  return value;
}

std::vector<Token> read_split(hid_t file, const char* name, int vocab, const std::string& label) {
  require(H5Lexists(file, name, H5P_DEFAULT) > 0, "{}: missing dataset /{}", label, name);
  const Handle dataset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  require(dataset.valid(), "{}: /{} is not a dataset", label, name);
  const Handle space(H5Dget_space(dataset.get()), H5Sclose);
  require(H5Sget_simple_extent_ndims(space.get()) == 1, "{}: dataset /{} is not 1-D", label, name);
  const Handle type(H5Dget_type(dataset.get()), H5Tclose);
  require(H5Tget_class(type.get()) == H5T_INTEGER, "{}: dataset /{} does not hold integers", label, name);
  hsize_t size = 0;
  H5Sget_simple_extent_dims(space.get(), &size, nullptr);
  std::vector<Token> tokens(size);
  if (size > 0)
    require(H5Dread(dataset.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()) >= 0,
            "{}: cannot read dataset /{} (corrupt file?)", label, name);
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
  {
    errno = 0;
    const Handle file(H5Fcreate(partial.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    require(file.valid(), "{}: cannot create ({})", label, errno != 0 ? std::strerror(errno) : "HDF5 error");
    write_split(file.get(), "train", corpus.train, corpus.vocab(), label);
    write_split(file.get(), "validation", corpus.validation, corpus.vocab(), label);
    io::write_tokenizer(file.get(), corpus.tokenizer, label);
    write_string_attribute(file.get(), "format", format_name, label);
    write_int_attribute(file.get(), "version", format_version, label);
    write_int_attribute(file.get(), "vocab", corpus.vocab(), label);
    write_string_attribute(file.get(), "source", corpus.source, label);
    require(H5Fflush(file.get(), H5F_SCOPE_GLOBAL) >= 0, "{}: cannot write", label);
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  require(!error, "{}: cannot rename {} into place ({})", label, partial, error.message());
}

bool is_hdf5_file(const std::string& path) {
  const QuietHdf5Errors quiet;
  return unreadable_reason(path).empty() && H5Fis_hdf5(path.c_str()) > 0;
}

Corpus read_token_file(const std::string& path, const std::string& label_or_empty) {
  const QuietHdf5Errors quiet;
  const std::string label = label_or_empty.empty() ? fmt::format("token file '{}'", path) : label_or_empty;
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("{}: cannot open ({})", label, reason));
  require(H5Fis_hdf5(path.c_str()) > 0, "{}: not an HDF5 file", label);
  const Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  require(file.valid(), "{}: cannot open as HDF5 (truncated or corrupt?)", label);
  require(H5Aexists(file.get(), "format") > 0, "{}: not a kpipe token file (no 'format' attribute)", label);
  const std::string format = read_string_attribute(file.get(), "format", label);
  require(format == format_name, "{}: not a kpipe token file (format '{}', expected '{}')", label, format,
          format_name);
  require(H5Aexists(file.get(), "version") > 0, "{}: no 'version' attribute", label);
  const long long version = read_int_attribute(file.get(), "version", label);
  require(version >= 1 && version <= format_version,
          "{}: version {} is not supported (this kpipe reads versions 1 to {})", label, version, format_version);
  require(H5Aexists(file.get(), "vocab") > 0, "{}: no 'vocab' attribute", label);
  const long long vocab = read_int_attribute(file.get(), "vocab", label);

  Corpus corpus;
  corpus.tokenizer = io::read_tokenizer(file.get(), label);  // version 1 has none: bytes
  require(vocab == corpus.vocab(), "{}: vocab = {}, but its {} tokenizer has {}", label, vocab,
          to_string(corpus.tokenizer.kind()), corpus.vocab());
  corpus.train = read_split(file.get(), "train", corpus.vocab(), label);
  corpus.validation = read_split(file.get(), "validation", corpus.vocab(), label);
  corpus.source = H5Aexists(file.get(), "source") > 0 ? read_string_attribute(file.get(), "source", label) : path;
  return corpus;
}

}  // namespace kpipe::data
