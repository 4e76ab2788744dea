// Splits read by range (data/token_split.hpp): a token file by hyperslab, a text file by offset, against the
// whole-file reading they replace; a damaged chunk reported by its position.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/token_file.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/h5/file.hpp"
#include "support/input_error.hpp"

namespace kpipe::data {
namespace {

using test::expect_input_error;

// The whole-file reader hyperslab reads replace: every id of the dataset at once.
std::vector<Token> whole_dataset(const std::string& path, const char* name) {
  const h5::Handle file = h5::open_file(path);
  return h5::read_int32s(file.get(), name, path);
}

// Training windows of `steps` steps and every validation window, drawn from both splits alike.
void expect_same_windows(const TokenSplit& got_train, const TokenSplit& want_train, const TokenSplit& got_validation,
                         const TokenSplit& want_validation, int seq_len) {
  ASSERT_EQ(got_train.size(), want_train.size());
  ASSERT_EQ(got_validation.size(), want_validation.size());
  const int sequences = 6;
  std::vector<Token> in(sequences * seq_len), tg(in.size()), want_in(in.size()), want_tg(in.size());
  for (int step = 0; step < 40; ++step) {
    fill_train_windows(got_train, 17, step, 0, sequences, seq_len, in.data(), tg.data());
    fill_train_windows(want_train, 17, step, 0, sequences, seq_len, want_in.data(), want_tg.data());
    ASSERT_EQ(in, want_in) << "step " << step;
    ASSERT_EQ(tg, want_tg) << "step " << step;
  }
  const std::int64_t windows = validation_windows(want_validation.size(), seq_len);
  for (std::int64_t w = 0; w + sequences <= windows; w += sequences) {
    fill_validation_windows(got_validation, w, sequences, seq_len, in.data(), tg.data());
    fill_validation_windows(want_validation, w, sequences, seq_len, want_in.data(), want_tg.data());
    ASSERT_EQ(in, want_in) << "validation window " << w;
    ASSERT_EQ(tg, want_tg) << "validation window " << w;
  }
}

TEST(TokenReads, HyperslabWindowsAreTheWholeFileReadersWindows) {
  test::TempDir dir;
  const std::string path = dir.path("tokens.h5");
  write_token_file(path, synthetic_corpus(8, 300000, 0.1));  // several chunks per split
  const Corpus file = read_token_file(path);
  const TokenSplit train = whole_dataset(path, "train"), validation = whole_dataset(path, "validation");
  expect_same_windows(file.train, train, file.validation, validation, 64);
  EXPECT_EQ(file.train.read_all(), train.read_all());
  // Ranges across a chunk boundary (64 Ki ids per uint8 chunk) and at both ends.
  for (const std::int64_t first : {std::int64_t(0), std::int64_t(65536 - 5), file.train.size() - 10}) {
    std::vector<Token> got(10);
    file.train.read(first, 10, got.data());
    const auto all = train.read_all();
    EXPECT_EQ(got, std::vector<Token>(all.begin() + first, all.begin() + first + 10)) << first;
  }
}

TEST(TokenReads, SixteenBitIdsAreWidenedForTheWindowsRead) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  test::TempDir dir;
  const Corpus text = synthetic_corpus(9, 120000, 0.0);
  const std::vector<Token> ids = text.train.read_all();
  BpeOptions options;
  options.vocab_size = 700;
  options.threads = 1;
  const Tokenizer bpe = train_bpe(std::string(ids.begin(), ids.end()), options);
  const std::string path = dir.path("bpe.h5");
  write_token_file(path, encoded_corpus(std::string(ids.begin(), ids.end()), bpe, 0.2, "synthetic"));
  const Corpus file = read_token_file(path);
  const TokenSplit train = whole_dataset(path, "train"), validation = whole_dataset(path, "validation");
  expect_same_windows(file.train, train, file.validation, validation, 32);
}

TEST(TokenReads, TextFileBytesAreTheInMemoryCorpus) {
  test::TempDir dir;
  const Corpus synthetic = synthetic_corpus(2, 50000, 0.0);
  const std::vector<Token> ids = synthetic.train.read_all();
  std::string text(ids.begin(), ids.end());
  text += std::string("\xff\x80 high bytes", 12);
  DataConfig config;
  config.path = dir.write("text.txt", text);
  config.val_fraction = 0.15;
  const Corpus from_file = load_corpus(config, 1, 16);
  const Corpus in_memory = text_corpus(text, 0.15, config.path);
  expect_same_windows(from_file.train, in_memory.train, from_file.validation, in_memory.validation, 16);
  EXPECT_EQ(from_file.validation.read_all(), in_memory.validation.read_all());
  // The file shrinks under the run: the read says so instead of training on garbage.
  std::filesystem::resize_file(config.path, 100);
  expect_input_error([&] { from_file.validation.read_all(); }, {config.path, "shorter"});
}

TEST(TokenReads, SlicesAndConcatenationsReadTheirRanges) {
  std::vector<Token> ids(100);
  std::iota(ids.begin(), ids.end(), 0);
  const TokenSplit all = ids;
  const TokenSplit middle = all.slice(10, 50);
  EXPECT_EQ(middle.size(), 50);
  std::vector<Token> got(5);
  middle.read(45, 5, got.data());
  EXPECT_EQ(got, (std::vector<Token>{55, 56, 57, 58, 59}));
  EXPECT_THROW(middle.read(46, 5, got.data()), std::out_of_range);
  EXPECT_THROW(all.slice(90, 11), std::out_of_range);
  const TokenSplit joined = concatenate(middle.slice(0, 3), all.slice(97, 3));
  EXPECT_EQ(joined.read_all(), (std::vector<Token>{10, 11, 12, 97, 98, 99}));
  joined.read(2, 2, got.data());
  EXPECT_EQ(got[0], 12);
  EXPECT_EQ(got[1], 97);
  EXPECT_TRUE(TokenSplit().empty());
}

#if H5_VERSION_GE(1, 10, 5)
// Where chunk `index` of a dataset lies in the file: its offset and stored size.
std::pair<haddr_t, hsize_t> chunk_in_file(const std::string& path, const char* name, hsize_t index) {
  const h5::Handle file = h5::open_file(path);
  const h5::Handle dataset(H5Dopen2(file.get(), name, H5P_DEFAULT), H5Dclose);
  const h5::Handle space(H5Dget_space(dataset.get()), H5Sclose);
  hsize_t offset[1] = {0};
  unsigned mask = 0;
  haddr_t address = 0;
  hsize_t size = 0;
  EXPECT_GE(H5Dget_chunk_info(dataset.get(), space.get(), index, offset, &mask, &address, &size), 0);
  return {address, size};
}

TEST(TokenReads, AFlippedByteInACompressedChunkIsReportedWithItsPosition) {
  test::TempDir dir;
  const std::string path = dir.path("large.h5");
  write_token_file(path, synthetic_corpus(5, 1 << 20, 0.05));  // about 15 chunks of 64 Ki tokens in /train
  const auto [address, size] = chunk_in_file(path, "train", 7);
  ASSERT_GT(size, 100u);
  ASSERT_LT(size, 65536u);  // compressed
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(std::streamoff(address + size / 2));
    const char byte = char(file.get());
    file.seekp(std::streamoff(address + size / 2));
    file.put(char(byte ^ 0x10));
  }
  const Corpus corpus = read_token_file(path);  // the file opens: its metadata is intact
  std::vector<Token> window(129);
  corpus.train.read(6 * 65536 + 100, 129, window.data());  // other chunks read
  corpus.train.read(8 * 65536, 129, window.data());
  // Chunk 7 holds tokens [458752, 524288); a window across its start names it.
  expect_input_error([&] { corpus.train.read(7 * 65536 - 64, 129, window.data()); },
                     {path, "/train", "tokens [458688, 458817)", "chunk 7 of", "tokens [458752, 524288)", "damaged"});
  // Training never draws past it: a whole pass of windows fails at it.
  expect_input_error([&] { check_readable(corpus.train); }, {path, "chunk 7 of"});
}
#endif

}  // namespace
}  // namespace kpipe::data
