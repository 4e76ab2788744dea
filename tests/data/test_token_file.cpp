#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/token_file.hpp"
#include "support/input_error.hpp"

namespace kpipe::data {
namespace {

using test::expect_input_error;

// An HDF5 file written by hand: attributes and datasets as given, to build wrong files.
void write_raw(const std::string& path, const char* format, int version, bool with_validation) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t n = 100;
  std::vector<unsigned char> bytes(n, 'a');
  for (const char* name : {"train", "validation"}) {
    if (std::string(name) == "validation" && !with_validation) continue;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t dataset = H5Dcreate2(file, name, H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dataset, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    H5Dclose(dataset);
    H5Sclose(space);
  }
  const hid_t scalar = H5Screate(H5S_SCALAR);
  if (format) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, std::string(format).size());
    const hid_t attribute = H5Acreate2(file, "format", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attribute, type, format);
    H5Aclose(attribute);
    H5Tclose(type);
  }
  for (const auto& [name, value] : {std::pair<const char*, int>{"version", version}, {"vocab", 256}}) {
    const hid_t attribute = H5Acreate2(file, name, H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attribute, H5T_NATIVE_INT, &value);
    H5Aclose(attribute);
  }
  H5Sclose(scalar);
  H5Fclose(file);
}

// A token file as another tool writes it: version 1 attributes (bytes), and splits chunked by 65536 tokens of
// `file_type`, of which only the chunks holding `written` (from the start) are written.
void write_chunked(const std::string& path, hid_t file_type, hsize_t tokens, const std::vector<std::int64_t>& written) {
  write_raw(path, "kpipe-tokens", 1, false);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  H5Ldelete(file, "train", H5P_DEFAULT);
  const hsize_t chunk = 65536;
  for (const char* name : {"train", "validation"}) {
    const hsize_t unlimited = H5S_UNLIMITED;  // extendible, as kpipe-prepare's: a chunk may exceed the extent
    const hid_t space = H5Screate_simple(1, &tokens, &unlimited);
    const hid_t create = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(create, 1, &chunk);
    const hid_t dataset = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, create, H5P_DEFAULT);
    if (!written.empty()) {
      const hsize_t first = 0, count = written.size();
      const hid_t part = H5Screate_simple(1, &count, nullptr);
      H5Sselect_hyperslab(space, H5S_SELECT_SET, &first, nullptr, &count, nullptr);
      H5Dwrite(dataset, H5T_NATIVE_INT64, part, space, H5P_DEFAULT, written.data());
      H5Sclose(part);
    }
    H5Dclose(dataset);
    H5Pclose(create);
    H5Sclose(space);
  }
  H5Fclose(file);
}

TEST(TokenFile, DataNeverWrittenIsRefusedLikeATruncatedFile) {
  test::TempDir dir;
  // A billion tokens claimed, none written: HDF5 would read its fill value, token 0, without a word.
  const std::string empty = dir.path("empty.h5");
  write_chunked(empty, H5T_STD_U8LE, 1000000000, {});
  expect_input_error([&] { read_token_file(empty); },
                     {empty, "/train claims 1000000000 tokens", "15259 of its 15259 storage chunks were never written"});
  // The first of three chunks written, two missing.
  const std::string part = dir.path("part.h5");
  write_chunked(part, H5T_STD_U8LE, 3 * 65536, std::vector<std::int64_t>(100, 7));
  expect_input_error([&] { read_token_file(part); }, {part, "2 of its 3 storage chunks were never written"});
  // Every chunk written: read.
  const std::string whole = dir.path("whole.h5");
  write_chunked(whole, H5T_STD_U8LE, 70000, std::vector<std::int64_t>(70000, 7));
  EXPECT_EQ(read_token_file(whole).train.size(), 70000);
}

TEST(TokenFile, AnIdBeyondThirtyTwoBitsIsReportedAsItsValue) {
  test::TempDir dir;
  std::vector<std::int64_t> ids(1000, 7);
  ids[123] = 5000000000;  // HDF5 would clamp it to 2147483647 on the way to an int32
  // HDF5's type names are macros calling H5open: not in a braced list (nvcc's front end refuses it).
  const hid_t int64 = H5T_STD_I64LE, uint64 = H5T_STD_U64LE;
  for (const hid_t type : {int64, uint64}) {
    const std::string path = dir.path(type == int64 ? "int64.h5" : "uint64.h5");
    write_chunked(path, type, ids.size(), ids);
    const Corpus corpus = read_token_file(path);
    std::vector<Token> out(100);
    corpus.train.read(0, 100, out.data());  // the ids before it are fine
    EXPECT_EQ(out[99], 7);
    expect_input_error([&] { corpus.train.read(100, 100, out.data()); },
                       {"/train holds token 5000000000 at position 123", "[0, 256)"});
  }
}

TEST(TokenFile, RoundTrip) {
  test::TempDir dir;
  const std::string path = dir.path("tokens.h5");
  Corpus corpus = synthetic_corpus(4, 150000, 0.1);  // more than one chunk
  std::vector<Token> train = corpus.train.read_all();
  train[7] = 0;
  train[8] = 255;
  corpus.train = train;
  write_token_file(path, corpus);
  EXPECT_TRUE(is_hdf5_file(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  const Corpus back = read_token_file(path);
  EXPECT_EQ(back.train.read_all(), train);
  EXPECT_EQ(back.validation.read_all(), corpus.validation.read_all());
  EXPECT_EQ(back.source, corpus.source);
  // Compressed: a 150 kB text file takes well under 150 kB.
  EXPECT_LT(std::filesystem::file_size(path), 100000u);
}

TEST(TokenFile, EmptySplitAndEmptySource) {
  test::TempDir dir;
  const std::string path = dir.path("small.h5");
  Corpus corpus;
  corpus.train = std::vector<Token>{1, 2, 3};
  write_token_file(path, corpus);
  const Corpus back = read_token_file(path);
  EXPECT_EQ(back.train.read_all(), (std::vector<Token>{1, 2, 3}));
  EXPECT_TRUE(back.validation.empty());
  EXPECT_EQ(back.source, "");
}

TEST(TokenFile, TokensMustBeInTheVocabulary) {
  test::TempDir dir;
  Corpus corpus;
  corpus.train = std::vector<Token>{1, 256};
  expect_input_error([&] { write_token_file(dir.path("bad.h5"), corpus); }, {"bad.h5", "256", "[0, 256)"});
  EXPECT_FALSE(std::filesystem::exists(dir.path("bad.h5")));
  EXPECT_FALSE(std::filesystem::exists(dir.path("bad.h5.partial")));  // nothing half-written is left
}

TEST(TokenFile, VersionOneStillReads) {
  test::TempDir dir;
  const std::string old = dir.path("old.h5");  // uint8 bytes, no /tokenizer: what kpipe wrote before tokenizers
  write_raw(old, "kpipe-tokens", 1, true);
  const Corpus back = read_token_file(old);
  EXPECT_EQ(back.tokenizer.kind(), TokenizerKind::bytes);
  EXPECT_EQ(back.vocab(), 256);
  EXPECT_EQ(back.train.read_all(), std::vector<Token>(100, 'a'));
}

TEST(TokenFile, WrongFilesNameTheFile) {
  test::TempDir dir;
  const std::string missing = dir.path("missing.h5");
  expect_input_error([&] { read_token_file(missing); }, {missing, "cannot open (No such file or directory)"});
  const std::string text = dir.write("text.h5", "just some text, not HDF5\n");
  expect_input_error([&] { read_token_file(text); }, {text, "not an HDF5 file"});
  EXPECT_FALSE(is_hdf5_file(text));
  EXPECT_FALSE(is_hdf5_file(missing));

  const std::string no_format = dir.path("no_format.h5");
  write_raw(no_format, nullptr, 1, true);
  expect_input_error([&] { read_token_file(no_format); }, {no_format, "not a kpipe token file"});
  const std::string other = dir.path("other.h5");
  write_raw(other, "kpipe-checkpoint", 1, true);
  expect_input_error([&] { read_token_file(other); }, {other, "'kpipe-checkpoint'"});
  const std::string future = dir.path("future.h5");
  write_raw(future, "kpipe-tokens", 3, true);
  expect_input_error([&] { read_token_file(future); }, {future, "version 3"});
  const std::string half = dir.path("half.h5");
  write_raw(half, "kpipe-tokens", 1, false);
  expect_input_error([&] { read_token_file(half); }, {half, "missing dataset /validation"});
}

TEST(TokenFile, TruncatedOrCorruptFilesNameTheFile) {
  test::TempDir dir;
  const Corpus corpus = synthetic_corpus(4, 200000, 0.1);
  const std::string truncated = dir.path("truncated.h5");
  write_token_file(truncated, corpus);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) / 2);
  expect_input_error([&] { read_token_file(truncated); }, {truncated});

  // Garbage over the compressed data, the header intact: the file opens, reading the tokens fails.
  const std::string corrupt = dir.path("corrupt.h5");
  write_token_file(corrupt, corpus);
  const auto size = std::filesystem::file_size(corrupt);
  {
    std::fstream file(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 4));
    const std::string garbage(size / 2, '\x5a');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  expect_input_error([&] { read_token_file(corrupt).train.read_all(); }, {corrupt});
}

}  // namespace
}  // namespace kpipe::data
