#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "kpipe/data/sampler.hpp"

namespace kpipe::data {
namespace {

// Token i is i: a window's content tells where it starts.
std::vector<Token> positions(int n) {
  std::vector<Token> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

TEST(Sampler, WindowStartIsDeterministicAndInRange) {
  const std::int64_t tokens = 1000;
  const int seq_len = 16;
  std::int64_t low = tokens, high = -1;
  double sum = 0;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    const std::int64_t start = window_start(7, i / 8, i % 8, tokens, seq_len);
    EXPECT_EQ(start, window_start(7, i / 8, i % 8, tokens, seq_len));
    ASSERT_GE(start, 0);
    ASSERT_LE(start, tokens - seq_len - 1);
    low = std::min(low, start);
    high = std::max(high, start);
    sum += double(start);
  }
  // Uniform over [0, 983]: both ends are reached and the mean is near the middle (std of the mean ~ 2).
  EXPECT_EQ(low, 0);
  EXPECT_EQ(high, tokens - seq_len - 1);
  EXPECT_NEAR(sum / draws, (tokens - seq_len - 1) / 2.0, 10.0);
}

TEST(Sampler, KeyedBySeedStepAndSequence) {
  const std::int64_t tokens = 1 << 20;
  const std::int64_t base = window_start(1, 5, 3, tokens, 64);
  EXPECT_NE(base, window_start(2, 5, 3, tokens, 64));
  EXPECT_NE(base, window_start(1, 6, 3, tokens, 64));
  EXPECT_NE(base, window_start(1, 5, 4, tokens, 64));
}

TEST(Sampler, SmallestCorpusHasOneWindow) {
  EXPECT_EQ(window_start(3, 0, 0, 9, 8), 0);
  EXPECT_THROW(window_start(3, 0, 0, 8, 8), std::invalid_argument);
}

TEST(Sampler, TargetsAreInputsShiftedByOne) {
  const auto tokens = positions(500);
  const int seq_len = 10, sequences = 4;
  std::vector<Token> inputs(sequences * seq_len), targets(sequences * seq_len);
  fill_train_windows(tokens, 11, 2, 0, sequences, seq_len, inputs.data(), targets.data());
  for (int s = 0; s < sequences; ++s) {
    const std::int64_t start = window_start(11, 2, s, 500, seq_len);
    for (int t = 0; t < seq_len; ++t) {
      EXPECT_EQ(inputs[s * seq_len + t], start + t);
      EXPECT_EQ(targets[s * seq_len + t], start + t + 1);
    }
  }
}

TEST(Sampler, MiniBatchIsTheSameWhateverTheMicroBatches) {
  const auto tokens = positions(4096);
  const int seq_len = 32, batch = 12;
  std::vector<Token> whole_in(batch * seq_len), whole_tg(batch * seq_len);
  fill_train_windows(tokens, 99, 41, 0, batch, seq_len, whole_in.data(), whole_tg.data());
  for (const int microbatches : {2, 3, 4, 12}) {
    const int per = batch / microbatches;
    std::vector<Token> in(batch * seq_len), tg(batch * seq_len);
    for (int m = 0; m < microbatches; ++m)
      fill_train_windows(tokens, 99, 41, m * per, per, seq_len, in.data() + m * per * seq_len,
                         tg.data() + m * per * seq_len);
    EXPECT_EQ(in, whole_in) << microbatches;
    EXPECT_EQ(tg, whole_tg) << microbatches;
  }
  // Another step draws another mini-batch.
  std::vector<Token> next_in(batch * seq_len), next_tg(batch * seq_len);
  fill_train_windows(tokens, 99, 42, 0, batch, seq_len, next_in.data(), next_tg.data());
  EXPECT_NE(next_in, whole_in);
}

TEST(Sampler, ValidationWindowsAreConsecutiveAndCoverTheSplit) {
  const int n = 1000, seq_len = 15;
  const auto tokens = positions(n);
  const std::int64_t windows = validation_windows(n, seq_len);
  EXPECT_EQ(windows, n / (seq_len + 1));
  std::vector<Token> inputs(windows * seq_len), targets(windows * seq_len);
  fill_validation_windows(tokens, 0, int(windows), seq_len, inputs.data(), targets.data());
  // Each window is tokens [w (L+1), (w+1)(L+1)): its inputs plus its last target; together, every token of
  // [0, windows (L+1)) exactly once, in order.
  std::vector<Token> covered;
  for (std::int64_t w = 0; w < windows; ++w) {
    for (int t = 0; t < seq_len; ++t) {
      EXPECT_EQ(targets[w * seq_len + t], inputs[w * seq_len + t] + 1);
      covered.push_back(inputs[w * seq_len + t]);
    }
    covered.push_back(targets[w * seq_len + seq_len - 1]);
  }
  EXPECT_EQ(covered, std::vector<Token>(tokens.begin(), tokens.begin() + windows * (seq_len + 1)));
  // A later range is the same as the tail of the whole.
  std::vector<Token> part_in(2 * seq_len), part_tg(2 * seq_len);
  fill_validation_windows(tokens, 5, 2, seq_len, part_in.data(), part_tg.data());
  EXPECT_TRUE(std::equal(part_in.begin(), part_in.end(), inputs.begin() + 5 * seq_len));
  EXPECT_THROW(fill_validation_windows(tokens, windows - 1, 2, seq_len, part_in.data(), part_tg.data()),
               std::out_of_range);
  EXPECT_EQ(validation_windows(seq_len, seq_len), 0);
}

}  // namespace
}  // namespace kpipe::data
