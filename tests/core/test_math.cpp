#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kpipe/core/math.hpp"

namespace kpipe {
namespace {

TEST(FastExp, WithinAboutOneUlpOverTheFloatRange) {
  double worst = 0;
  for (float x = -87.3f; x < 88.72f; x += 0.00731f) {
    const double exact = std::exp(double(x));
    worst = std::max(worst, std::abs(double(math::fast_exp(x)) - exact) / exact);
  }
  EXPECT_LT(worst, 1.5e-7);  // float's epsilon is 1.19e-7
  EXPECT_EQ(math::fast_exp(0.0f), 1.0f);
}

TEST(FastExp, SaturatesAtTheEnds) {
  EXPECT_EQ(math::fast_exp(1000.0f), std::numeric_limits<float>::infinity());
  EXPECT_GT(math::fast_exp(-1000.0f), 0.0f);
  EXPECT_LT(math::fast_exp(-1000.0f), 1.3e-38f);
  EXPECT_EQ(math::fast_exp(88.8f), std::numeric_limits<float>::infinity());  // exp(88.8) > FLT_MAX
  EXPECT_LT(math::fast_exp(88.7f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(math::fast_exp(2.5), std::exp(2.5));  // double: the library's
}

}  // namespace
}  // namespace kpipe
