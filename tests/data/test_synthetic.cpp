#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kpipe/data/entropy.hpp"
#include "kpipe/data/synthetic.hpp"

namespace kpipe::data {
namespace {

std::string text_of(const Corpus& corpus) {
  std::string text;
  for (const Token t : corpus.train.read_all()) text += static_cast<char>(t);
  for (const Token t : corpus.validation.read_all()) text += static_cast<char>(t);
  return text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  lines.pop_back();  // the last one may be cut off
  return lines;
}

TEST(Synthetic, DeterministicForASeedAndDifferentForAnother) {
  const Corpus a = synthetic_corpus(5, 20000, 0.1), b = synthetic_corpus(5, 20000, 0.1);
  EXPECT_EQ(a.train.read_all(), b.train.read_all());
  EXPECT_EQ(a.validation.read_all(), b.validation.read_all());
  EXPECT_NE(synthetic_corpus(6, 20000, 0.1).train.read_all(), a.train.read_all());
}

TEST(Synthetic, SizesAndSplit) {
  const Corpus c = synthetic_corpus(1, 12345, 0.2);
  EXPECT_EQ(c.train.size() + c.validation.size(), 12345);
  EXPECT_EQ(c.validation.size(), 2469);  // round(12345 * 0.2)
  // The split is the tail of the same text.
  const Corpus all = synthetic_corpus(1, 12345, 0.5);
  EXPECT_EQ(text_of(c), text_of(all));
  EXPECT_NE(c.source.find("synthetic"), std::string::npos);
}

// kpipe-prepare streams the corpus in pieces: the pieces end to end are the in-memory corpus's text, whatever
// their size.
TEST(Synthetic, StreamedInPiecesItIsTheSameText) {
  const Corpus c = synthetic_corpus(3, 50001, 0.1);
  for (const std::size_t piece_bytes : {std::size_t(1), std::size_t(777), std::size_t(1) << 20}) {
    std::string streamed;
    std::size_t pieces = 0;
    stream_synthetic_text(3, 50001, piece_bytes, [&](const std::string& piece) {
      EXPECT_FALSE(piece.empty());
      streamed += piece;
      ++pieces;
    });
    EXPECT_EQ(streamed, text_of(c)) << piece_bytes;
    if (piece_bytes == 777) {
      EXPECT_GT(pieces, 50u);
    }
  }
}

TEST(Synthetic, PrintableLines) {
  const std::string text = text_of(synthetic_corpus(3, 50000, 0.1));
  for (const char c : text) ASSERT_TRUE(c == '\n' || (c >= 32 && c < 127)) << int(c);
  EXPECT_GT(lines_of(text).size(), 500u);
}

// Structure beyond byte frequencies: knowing the previous byte says much about the next one.
TEST(Synthetic, HasStructure) {
  const Corpus c = synthetic_corpus(1234, 1 << 18, 0.1);
  const std::vector<Token> train = c.train.read_all();
  const double unigram = unigram_entropy_nats(train), bigram = bigram_conditional_entropy_nats(train);
  EXPECT_GT(unigram, 2.5);           // many bytes in use: a model cannot win by frequencies alone
  EXPECT_LT(bigram, unigram - 0.8);  // but the previous byte tells a lot
}

TEST(Synthetic, ArithmeticIsRightCopiesCopyBracketsBalance) {
  const std::string text = text_of(synthetic_corpus(8, 200000, 0.1));
  int facts = 0, copies = 0, brackets = 0, stories = 0;
  for (const std::string& line : lines_of(text)) {
    std::istringstream words(line);
    std::string head;
    words >> head;
    if (head == "math:") {
      for (std::string fact; words >> fact; ++facts) {
        const auto op = fact.find_first_of("+-*"), eq = fact.find('=');
        ASSERT_NE(op, std::string::npos) << fact;
        ASSERT_NE(eq, std::string::npos) << fact;
        const long a = std::stol(fact.substr(0, op)), b = std::stol(fact.substr(op + 1, eq - op - 1));
        const long c = std::stol(fact.substr(eq + 1));
        EXPECT_EQ(c, fact[op] == '+' ? a + b : fact[op] == '-' ? a - b : a * b) << fact;
      }
    } else if (head == "copy:") {
      const auto bar = line.find(" | ");
      ASSERT_NE(bar, std::string::npos) << line;
      EXPECT_EQ(line.substr(6, bar - 6), line.substr(bar + 3)) << line;
      ++copies;
    } else if (head == "brackets:") {
      std::string stack;
      for (const char c : line.substr(10)) {
        const std::string open = "([{<", close = ")]}>";
        if (open.find(c) != std::string::npos) {
          stack += close[open.find(c)];
        } else {
          ASSERT_FALSE(stack.empty()) << line;
          ASSERT_EQ(c, stack.back()) << line;
          stack.pop_back();
        }
      }
      EXPECT_TRUE(stack.empty()) << line;
      ++brackets;
    } else if (!head.empty() && std::isupper(static_cast<unsigned char>(head[0]))) {
      EXPECT_TRUE(line.back() == '.' || line.substr(line.size() - 2) == ".\"") << line;
      ++stories;
    }
  }
  EXPECT_GT(facts, 100);
  EXPECT_GT(copies, 50);
  EXPECT_GT(brackets, 50);
  EXPECT_GT(stories, 500);
}

TEST(Synthetic, SubjectAndVerbAgree) {
  // "The cats that chase ..." / "The cat that chases ...": in a subject relative the verb agrees with the head.
  const std::string text = text_of(synthetic_corpus(21, 300000, 0.1));
  int checked = 0;
  for (const std::string& noun : {std::string("fox"), std::string("foxes")}) {
    const std::string probe = " " + noun + " that ";
    for (auto at = text.find(probe); at != std::string::npos; at = text.find(probe, at + 1)) {
      std::istringstream rest(text.substr(at + probe.size(), 40));
      std::string next;
      rest >> next;
      static const std::vector<std::string> singular = {"sees",    "likes",   "chases", "finds", "helps",
                                                        "follows", "watches", "feeds",  "calls", "knows"};
      static const std::vector<std::string> plural = {"see",    "like",  "chase", "find", "help",
                                                      "follow", "watch", "feed",  "call", "know"};
      const auto& right = noun == "fox" ? singular : plural;
      const auto& wrong = noun == "fox" ? plural : singular;
      if (std::find(right.begin(), right.end(), next) != right.end()) ++checked;
      EXPECT_EQ(std::find(wrong.begin(), wrong.end(), next), wrong.end()) << text.substr(at, 60);
    }
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace kpipe::data
