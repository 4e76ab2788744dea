// The sampler: greedy is the argmax, top-k and the allowed ids bound what can come out, the frequencies
// follow softmax(logits / temperature), and the draw is a pure function of (seed, position).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kpipe/runtime/sampling.hpp"
#include "support/input_error.hpp"

namespace kpipe::runtime {
namespace {

SamplingOptions options(double temperature, int top_k, std::uint64_t seed = 1) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  return o;
}

TEST(Sampling, GreedyTakesTheLargestAllowedLogitLowestIdOnTies) {
  const std::vector<double> logits{0.5, 3.0, -1.0, 3.0, 2.9};
  const std::vector<bool> all(5, true);
  for (int position = 0; position < 20; ++position) EXPECT_EQ(sample_token(logits, all, options(0, 0), position), 1);
  EXPECT_EQ(sample_token(logits, {true, false, true, true, true}, options(0, 0), 0), 3);
  EXPECT_EQ(sample_token(logits, {true, false, true, false, true}, options(0, 0), 0), 4);
  // top-k 1 is greedy whatever the temperature.
  EXPECT_EQ(sample_token(logits, all, options(5.0, 1), 7), 1);
}

TEST(Sampling, OnlyTheTopKAllowedIdsComeOut) {
  const std::vector<double> logits{1.0, 4.0, 3.0, 2.0, 0.0, -1.0};
  const std::vector<bool> allowed{true, true, false, true, true, true};
  std::vector<int> seen(logits.size(), 0);
  for (int position = 0; position < 2000; ++position) ++seen[sample_token(logits, allowed, options(3.0, 3), position)];
  // The three most likely allowed ids: 1, 3, 0 (2 is not allowed).
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[3], 0);
  EXPECT_GT(seen[0], 0);
  EXPECT_EQ(seen[2], 0);
  EXPECT_EQ(seen[4], 0);
  EXPECT_EQ(seen[5], 0);
  // Non-finite logits (a masked vocabulary) are never drawn.
  EXPECT_EQ(sample_token({-INFINITY, NAN, 0.0}, {true, true, true}, options(1.0, 0), 3), 2);
}

TEST(Sampling, FrequenciesFollowTheTemperedSoftmax) {
  // p(1) = e^{ln 3 / T} / (1 + e^{ln 3 / T}): 3/4 at T = 1, 9/10 at T = 0.5, 1/2 at T -> infinity.
  const std::vector<double> logits{0.0, std::log(3.0)};
  const std::vector<bool> all(2, true);
  for (const auto& [temperature, expected] : {std::pair{1.0, 0.75}, {0.5, 0.9}, {1e6, 0.5}}) {
    int ones = 0;
    const int draws = 20000;
    for (int position = 0; position < draws; ++position)
      ones += sample_token(logits, all, options(temperature, 0, 42), position);
    // Five standard deviations of a binomial proportion: 0.016 at most; the draws are deterministic.
    EXPECT_NEAR(double(ones) / draws, expected, 0.016) << "temperature " << temperature;
  }
}

TEST(Sampling, TheDrawIsAFunctionOfSeedAndPosition) {
  std::vector<double> logits(50);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(double(i));
  const std::vector<bool> all(logits.size(), true);
  std::vector<Token> a, b, c;
  for (int position = 0; position < 200; ++position) {
    a.push_back(sample_token(logits, all, options(1.0, 0, 7), position));
    b.push_back(sample_token(logits, all, options(1.0, 0, 7), position));
    c.push_back(sample_token(logits, all, options(1.0, 0, 8), position));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampling, OptionsAreChecked) {
  test::expect_input_error([] { validate(options(-0.5, 0)); }, {"--temperature = -0.5"});
  test::expect_input_error([] { validate(options(NAN, 0)); }, {"--temperature = nan"});
  test::expect_input_error([] { validate(options(1.0, -3)); }, {"--top-k = -3"});
  EXPECT_THROW(sample_token({1.0}, {false}, options(1.0, 0), 0), std::invalid_argument);
  EXPECT_THROW(sample_token({}, {}, options(1.0, 0), 0), std::invalid_argument);
}

}  // namespace
}  // namespace kpipe::runtime
