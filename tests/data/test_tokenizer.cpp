// Tokenizers: bytes are the identity; a BPE model (SentencePiece, where built in) gives every valid UTF-8
// text back exactly, knows no unknown byte, is stored in token files and verified when read back.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/token_file.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/h5/file.hpp"
#include "support/input_error.hpp"

namespace kpipe::data {
namespace {

using test::expect_input_error;

std::string synthetic_text(std::int64_t bytes) {
  const Corpus corpus = synthetic_corpus(3, bytes, 0.0);
  const std::vector<Token> ids = corpus.train.read_all();
  return std::string(ids.begin(), ids.end());
}

// Text with what trips tokenizers: runs of spaces, tabs, CR LF, blank lines, multi-byte UTF-8, digits.
const std::string awkward = "  two  leading spaces\ttab\r\n\n\nemoji \xF0\x9F\x99\x82 euro \xE2\x82\xAC 12345 \x01 end";

const Tokenizer& trained_bpe() {
  static const Tokenizer bpe = [] {
    BpeOptions options;
    options.vocab_size = 600;
    options.threads = 1;
    return train_bpe(synthetic_text(200000), options);
  }();
  return bpe;
}

TEST(Tokenizer, BytesAreTheIdentity) {
  const Tokenizer bytes;
  EXPECT_EQ(bytes.kind(), TokenizerKind::bytes);
  EXPECT_EQ(bytes.vocab(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  const auto ids = bytes.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(bytes.decode(ids), all);
  EXPECT_TRUE(bytes.can_generate(0));
  EXPECT_FALSE(bytes.can_generate(256));
  EXPECT_EQ(bytes.piece('a'), "a");
  EXPECT_EQ(bytes.piece('\n'), "<0x0A>");
  expect_input_error([&] { bytes.decode({65, 300}); }, {"token 300", "position 1", "[0, 256)"});
}

TEST(Tokenizer, CountsInvalidUtf8) {
  EXPECT_EQ(invalid_utf8_sequences("plain ascii"), 0);
  EXPECT_EQ(invalid_utf8_sequences(awkward), 0);
  EXPECT_EQ(invalid_utf8_sequences("a\xFF" "b"), 1);
  EXPECT_EQ(invalid_utf8_sequences("\xE2\x82"), 2);           // truncated: each byte on its own
  EXPECT_EQ(invalid_utf8_sequences("\xC0\xAF"), 2);           // overlong
  EXPECT_EQ(invalid_utf8_sequences("\xED\xA0\x80"), 3);       // a surrogate
}

TEST(Tokenizer, BpeGivesTextBackExactly) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  const Tokenizer& bpe = trained_bpe();
  EXPECT_EQ(bpe.kind(), TokenizerKind::sentencepiece);
  EXPECT_GT(bpe.vocab(), 256 + 1);
  EXPECT_LE(bpe.vocab(), 600);
  const std::string text = synthetic_text(300000);  // several 64 KiB encoding blocks
  const auto ids = bpe.encode(text);
  EXPECT_LT(ids.size(), text.size() / 2) << "merges must shorten the text";
  EXPECT_EQ(bpe.decode(ids), text);
  // Never-seen characters fall back to their bytes: nothing is unknown.
  EXPECT_EQ(bpe.decode(bpe.encode(awkward)), awkward);
  for (const Token id : bpe.encode(awkward)) EXPECT_TRUE(bpe.can_generate(id)) << id;
  EXPECT_FALSE(bpe.can_generate(0)) << "the unknown piece";
  EXPECT_FALSE(bpe.can_generate(bpe.vocab()));
}

TEST(Tokenizer, BpeEncodesLineBlocksAsTheWholeText) {
  // encode() works in blocks ending at newlines; a piece never spans a newline, so the blocks' ids
  // are the whole text's: encoding two halves cut at a newline gives the same ids.
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  const Tokenizer& bpe = trained_bpe();
  const std::string text = synthetic_text(150000);
  const std::size_t cut = text.find('\n', 70000) + 1;
  auto first = bpe.encode(text.substr(0, cut));
  const auto second = bpe.encode(text.substr(cut));
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(bpe.encode(text), first);
}

TEST(Tokenizer, BpeErrors) {
  if (!sentencepiece_available()) {
    expect_input_error([] { train_bpe("some text", {}); }, {"without SentencePiece"});
    return;
  }
  BpeOptions small;
  small.vocab_size = 200;
  expect_input_error([&] { train_bpe("some text\n", small); }, {"--vocab-size = 200"});
  expect_input_error([] { train_bpe("", {}); }, {"empty"});
  expect_input_error([] { Tokenizer::sentencepiece("not a model", "here"); }, {"here", "not a SentencePiece model"});
  // A text with few distinct pieces gives a smaller vocabulary than asked.
  BpeOptions large;
  large.vocab_size = 5000;
  large.threads = 1;
  EXPECT_LT(train_bpe("abab abab cdcd\nabab\n", large).vocab(), 5000);
}

TEST(TokenFile, KeepsItsBpeTokenizer) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  test::TempDir dir;
  const std::string path = dir.path("bpe.h5");
  const Corpus corpus = encoded_corpus(synthetic_text(50000), trained_bpe(), 0.1, "synthetic");
  ASSERT_GT(corpus.vocab(), 256);
  write_token_file(path, corpus);
  const Corpus back = read_token_file(path);
  EXPECT_EQ(back.train.read_all(), corpus.train.read_all());
  EXPECT_EQ(back.validation.read_all(), corpus.validation.read_all());
  EXPECT_EQ(back.tokenizer.kind(), TokenizerKind::sentencepiece);
  EXPECT_EQ(back.tokenizer.serialized_model(), corpus.tokenizer.serialized_model());
  EXPECT_EQ(back.tokenizer.decode(back.train.read_all()), corpus.tokenizer.decode(corpus.train.read_all()));
  // Ids above 255 need 16 bits: the datasets are uint16. (Opened with kpipe's file access, as `back` holds
  // the file open: HDF5 refuses a second open of it with other settings.)
  const h5::Handle file = h5::open_file(path);
  const h5::Handle dataset(H5Dopen2(file.get(), "train", H5P_DEFAULT), H5Dclose);
  const h5::Handle type(H5Dget_type(dataset.get()), H5Tclose);
  EXPECT_EQ(H5Tget_size(type.get()), 2u);
}

// Overwrites `bytes` bytes of dataset `name` in place (through HDF5, so the file stays well-formed).
template <class T> void overwrite(const std::string& path, const char* name, hid_t memory_type, std::vector<T> values) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
  const hsize_t start = 0, count = values.size();
  const hid_t space = H5Dget_space(dataset);
  H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
  const hid_t memory = H5Screate_simple(1, &count, nullptr);
  H5Dwrite(dataset, memory_type, memory, space, H5P_DEFAULT, values.data());
  H5Sclose(memory);
  H5Sclose(space);
  H5Dclose(dataset);
  H5Fclose(file);
}

TEST(TokenFile, DamagedTokenizerOrOutOfVocabularyIdsAreRefused) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  test::TempDir dir;
  const Corpus corpus = encoded_corpus(synthetic_text(50000), trained_bpe(), 0.1, "synthetic");
  const std::string flipped = dir.path("flipped.h5");
  write_token_file(flipped, corpus);
  overwrite<unsigned char>(flipped, "tokenizer/model", H5T_NATIVE_UCHAR, {0x55, 0x55, 0x55});
  expect_input_error([&] { read_token_file(flipped); }, {flipped, "/tokenizer/model", "checksum"});

  const std::string outside = dir.path("outside.h5");
  write_token_file(outside, corpus);
  overwrite<unsigned short>(outside, "validation", H5T_NATIVE_USHORT, {7, 65000});
  // Ids are checked as they are read: the file opens, the range that holds the id does not read.
  const Corpus opened = read_token_file(outside);
  expect_input_error([&] { opened.validation.read_all(); },
                     {outside, "/validation", "token 65000", "position 1",
                      fmt::format("[0, {})", corpus.vocab())});
}

}  // namespace
}  // namespace kpipe::data
