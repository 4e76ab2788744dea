// kpipe-prepare's streaming: text from several files and directories, encoded in small batches on several
// threads, gives the token file that encoding the whole text in memory gives; the BPE sample is bounded.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/bpe_sample.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/data/entropy.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/text_encoder.hpp"
#include "kpipe/data/text_inputs.hpp"
#include "kpipe/data/token_file.hpp"
#include "kpipe/data/token_file_writer.hpp"
#include "support/input_error.hpp"

namespace kpipe::data {
namespace {

using test::expect_input_error;

std::string synthetic_text(std::uint64_t seed, std::int64_t bytes) {
  const std::vector<Token> ids = synthetic_corpus(seed, bytes, 0.0).train.read_all();
  return std::string(ids.begin(), ids.end());
}

// The text in three files, two of them in a directory (listed in path order, not creation order).
struct SplitText {
  test::TempDir dir;
  std::string text;
  std::vector<std::string> inputs;
  explicit SplitText(const std::string& whole) : text(whole) {
    const std::size_t a = whole.size() / 3, b = 2 * whole.size() / 3 + 7;  // not at line ends
    inputs.push_back(dir.write("first.txt", whole.substr(0, a)));
    std::filesystem::create_directories(dir.path("more/sub"));
    dir.write("more/sub/b.txt", whole.substr(b));
    dir.write("more/a.txt", whole.substr(a, b - a));
    inputs.push_back(dir.path("more"));
  }
};

// Encodes the text into a token file in batches of `batch_bytes` on `threads` threads, and reads it back.
Corpus streamed(const TextStream& text, std::int64_t train_bytes, const Tokenizer& tokenizer, const std::string& path,
                std::int64_t batch_bytes, int threads, EncodeSummary* summary = nullptr) {
  TokenFileWriter writer(path, tokenizer, "test");
  EncodeOptions options;
  options.threads = threads;
  options.batch_bytes = batch_bytes;
  std::vector<std::int64_t> progress;
  const EncodeSummary s = encode_text(text, train_bytes, tokenizer, writer, options,
                                      [&](std::int64_t done) { progress.push_back(done); });
  writer.commit();
  EXPECT_FALSE(progress.empty());
  for (std::size_t k = 1; k < progress.size(); ++k) EXPECT_GT(progress[k], progress[k - 1]);
  EXPECT_EQ(progress.back(), text.size());
  if (summary) *summary = s;
  return read_token_file(path);
}

TEST(TextEncoder, FilesAndDirectoriesAreOneTextInPathOrder) {
  const SplitText split(synthetic_text(1, 30000));
  const TextStream text(list_text_files(split.inputs));
  ASSERT_EQ(text.files().size(), 3u);
  EXPECT_EQ(text.files()[1].path, split.dir.path("more/a.txt"));
  EXPECT_EQ(text.size(), std::int64_t(split.text.size()));
  EXPECT_EQ(text.read(0, text.size()), split.text);
  EXPECT_EQ(text.read(9990, 20010), split.text.substr(9990, 20010));  // across both file boundaries
}

TEST(TextEncoder, StreamedBytesAreTheWholeTextsTokens) {
  const SplitText split(synthetic_text(2, 200000));
  const TextStream text(list_text_files(split.inputs));
  const Corpus whole = text_corpus(split.text, 0.1, "test");
  EncodeSummary summary;
  const Corpus file = streamed(text, whole.train.size(), Tokenizer(), split.dir.path("bytes.h5"), 7777, 3, &summary);
  EXPECT_EQ(file.train.read_all(), whole.train.read_all());
  EXPECT_EQ(file.validation.read_all(), whole.validation.read_all());
  EXPECT_DOUBLE_EQ(entropy_of_counts_nats(summary.train_counts), unigram_entropy_nats(whole.train.read_all()));
}

TEST(TextEncoder, StreamedBpeIsTheWholeTextsEncoding) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  const SplitText split(synthetic_text(3, 150000));
  const TextStream text(list_text_files(split.inputs));
  BpeOptions options;
  options.vocab_size = 500;
  options.threads = 1;
  const std::int64_t train_bytes = 135000;  // mid-line: the split cuts a line, as the in-memory path does
  const Tokenizer bpe = train_bpe(split.text.substr(0, std::size_t(train_bytes)), options);
  // Batches of 5000 bytes end at newlines; blocks on 4 threads too.
  const Corpus file = streamed(text, train_bytes, bpe, split.dir.path("bpe.h5"), 5000, 4);
  EXPECT_EQ(file.train.read_all(), bpe.encode(split.text.substr(0, std::size_t(train_bytes))));
  EXPECT_EQ(file.validation.read_all(), bpe.encode(split.text.substr(std::size_t(train_bytes))));
}

TEST(TextEncoder, ALineLongerThanABatchIsCutAtACharacterBoundary) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  test::TempDir dir;
  std::string line;
  for (int k = 0; k < 3000; ++k) line += "\xE2\x82\xAC";  // 9000 bytes of euro signs, no newline
  const TextStream text(list_text_files({dir.write("long.txt", line + "\nend\n")}));
  BpeOptions options;
  options.vocab_size = 300;
  options.threads = 1;
  const Tokenizer bpe = train_bpe(line, options);
  EncodeSummary summary;
  const Corpus file = streamed(text, text.size() - 2, bpe, dir.path("long.h5"), 1000, 2, &summary);
  EXPECT_EQ(summary.invalid_utf8, 0);  // no character was split
  EXPECT_EQ(bpe.decode(file.train.read_all()) + bpe.decode(file.validation.read_all()), line + "\nend\n");
}

TEST(TextEncoder, AWriterLeftUncommittedLeavesNothing) {
  test::TempDir dir;
  const std::string path = dir.path("out.h5");
  {
    TokenFileWriter writer(path, Tokenizer(), "test");
    writer.append_bytes(Split::train, "abc", 3);
    EXPECT_TRUE(std::filesystem::exists(path + ".partial"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

TEST(TextEncoder, UnreadableInputsAreNamed) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path("corpus"));
  dir.write("corpus/a.txt", "text\n");
  const std::string fifo = dir.path("corpus/b.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_input_error([&] { list_text_files({dir.path("corpus")}); }, {"input '" + fifo + "'", "FIFO"});
  const std::string missing = dir.path("missing.txt");
  expect_input_error([&] { list_text_files({missing}); }, {"input '" + missing + "'", "No such file"});
  // A file that shrinks after it was listed: the read names it.
  const std::string shrinking = dir.write("shrinking.txt", std::string(1000, 'x'));
  const TextStream text(list_text_files({shrinking}));
  std::filesystem::resize_file(shrinking, 10);
  expect_input_error([&] { text.read(0, 1000); }, {shrinking, "shorter"});
}

TEST(BpeSample, SmallTextsWholeLargeOnesBoundedWholeLinesFromEverywhere) {
  test::TempDir dir;
  std::string text;
  for (int k = 0; k < 20000; ++k) text += "line " + std::to_string(k) + " of the text\n";
  const TextStream stream(list_text_files({dir.write("text.txt", text)}));
  EXPECT_EQ(bpe_sample(stream, 5000, 5000), text.substr(0, 5000));  // within the bound: all of it
  const std::string sample = bpe_sample(stream, stream.size(), 40000);
  EXPECT_LE(sample.size(), 40000u);
  EXPECT_GT(sample.size(), 30000u);
  EXPECT_EQ(sample, bpe_sample(stream, stream.size(), 40000));  // deterministic
  // Whole lines only, from the beginning, the middle and the end of the text.
  std::size_t lines = 0;
  for (std::size_t at = 0; at < sample.size(); ++lines) {
    const std::size_t end = sample.find('\n', at);
    ASSERT_NE(end, std::string::npos);
    const std::string line = sample.substr(at, end - at + 1);
    ASSERT_NE(("\n" + text).find("\n" + line), std::string::npos) << line;
    ASSERT_EQ(line.rfind("line ", 0), 0u) << line;
    at = end + 1;
  }
  EXPECT_GT(lines, 1000u);
  EXPECT_EQ(sample.rfind("line 0 of", 0), 0u);
  const std::string last = "\nline 19999 of the text\n";
  EXPECT_EQ(sample.substr(sample.size() - last.size()), last);
  bool middle = false;
  for (int k = 9000; k < 11000 && !middle; ++k) middle = sample.find("line " + std::to_string(k) + " of") != std::string::npos;
  EXPECT_TRUE(middle);
}

}  // namespace
}  // namespace kpipe::data
