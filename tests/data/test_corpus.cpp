#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/data/entropy.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/token_file.hpp"

namespace kpipe::data {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

std::vector<Token> tokens_of(const std::string& s) { return std::vector<Token>(s.begin(), s.end()); }

TEST(Corpus, TextSplitsOffTheTail) {
  const Corpus c = text_corpus("abcdefghij", 0.3, "letters");
  EXPECT_EQ(c.train.read_all(), tokens_of("abcdefg"));
  EXPECT_EQ(c.validation.read_all(), tokens_of("hij"));
  EXPECT_EQ(c.source, "letters");
  // Bytes above 127 are tokens 128..255, not negative.
  const Corpus high = text_corpus(std::string("\xff\x80", 2), 0.5, "");
  EXPECT_EQ(high.train.read_all(), std::vector<Token>{255});
  EXPECT_EQ(high.validation.read_all(), std::vector<Token>{128});
}

TEST(Corpus, EmptyPathIsTheSyntheticCorpus) {
  DataConfig config;
  config.synthetic_tokens = 10000;
  config.val_fraction = 0.1;
  const Corpus c = load_corpus(config, 77, 64);
  const Corpus direct = synthetic_corpus(77, 10000, 0.1);
  EXPECT_EQ(c.train.read_all(), direct.train.read_all());
  EXPECT_EQ(c.validation.read_all(), direct.validation.read_all());
}

TEST(Corpus, LoadsTextAndTokenFiles) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + " of a small text file\n";
  DataConfig config;
  config.path = dir.write("small.txt", text);
  config.val_fraction = 0.2;
  const Corpus from_text = load_corpus(config, 1, 16);
  const Corpus expected = text_corpus(text, 0.2, config.path);
  EXPECT_EQ(from_text.train.read_all(), expected.train.read_all());
  EXPECT_EQ(from_text.validation.read_all(), expected.validation.read_all());
  EXPECT_EQ(from_text.source, config.path);

  config.path = dir.path("small.h5");
  write_token_file(config.path, expected);
  const Corpus from_file = load_corpus(config, 1, 16);  // val_fraction does not apply: the file has its split
  EXPECT_EQ(from_file.train.read_all(), expected.train.read_all());
  EXPECT_EQ(from_file.validation.read_all(), expected.validation.read_all());
}

TEST(Corpus, UnreadablePathsNameTheKey) {
  test::TempDir dir;
  DataConfig config;
  config.path = dir.path("x");
  EXPECT_EQ(error_of([&] { load_corpus(config, 1, 8); }),
            "data.path = '" + config.path + "': cannot open (No such file or directory)");
  config.path = dir.root().string();
  EXPECT_EQ(error_of([&] { load_corpus(config, 1, 8); }), "data.path = '" + config.path + "': cannot open (is a directory)");
  // A token file that is wrong says so under the key's name.
  config.path = dir.path("bad.h5");
  Corpus corpus;
  corpus.train = tokens_of("0123456789");
  write_token_file(config.path, corpus);
  EXPECT_EQ(error_of([&] { load_corpus(config, 1, 8); }),
            "data.path = '" + config.path + "': the validation split has 0 tokens, fewer than model.seq_len + 1 = 9");
}

TEST(Corpus, EverySplitHoldsAWindow) {
  test::TempDir dir;
  DataConfig config;
  config.path = dir.write("tiny.txt", std::string(100, 'a'));
  config.val_fraction = 0.1;  // 90 + 10 tokens
  EXPECT_NO_THROW(load_corpus(config, 1, 9));
  const std::string message = error_of([&] { load_corpus(config, 1, 10); });
  EXPECT_NE(message.find("validation split has 10 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("model.seq_len + 1 = 11"), std::string::npos) << message;
  config.path = dir.write("empty.txt", "");
  EXPECT_NE(error_of([&] { load_corpus(config, 1, 4); }).find("train split has 0 tokens"), std::string::npos);
  DataConfig synthetic;
  synthetic.synthetic_tokens = 100;
  EXPECT_NE(error_of([&] { load_corpus(synthetic, 1, 64); }).find("data.synthetic_tokens = 100"), std::string::npos);
}

TEST(Entropy, KnownValues) {
  EXPECT_DOUBLE_EQ(unigram_entropy_nats(tokens_of("aaaa")), 0.0);
  EXPECT_NEAR(unigram_entropy_nats(tokens_of("abcdabcd")), std::log(4.0), 1e-12);
  EXPECT_EQ(unigram_entropy_nats({}), 0.0);
  // "abab...": two symbols, each one predicting the next.
  const auto alternating = tokens_of("abababababababab");
  EXPECT_NEAR(unigram_entropy_nats(alternating), std::log(2.0), 1e-12);
  EXPECT_NEAR(bigram_conditional_entropy_nats(alternating), 0.0, 1e-12);
  // After 'a' comes 'a' or 'b' equally often: one bit of the two.
  const auto coin = tokens_of("aaabaaab");  // pairs aa aa ab ba aa aa ab: after a: a a b a a b -> 4 a, 2 b
  const double p = 4.0 / 6.0;
  const double after_a = -(p * std::log(p) + (1 - p) * std::log(1 - p));
  EXPECT_NEAR(bigram_conditional_entropy_nats(coin), after_a * 6.0 / 7.0, 1e-12);
}

}  // namespace
}  // namespace kpipe::data
