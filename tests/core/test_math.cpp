#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

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

template <class T> void every_special_value_is_found() {
  std::vector<T> values(1037);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = T(i) * T(-0.37);
  values[5] = std::numeric_limits<T>::max();
  values[6] = std::numeric_limits<T>::denorm_min();
  EXPECT_TRUE(math::all_finite(values.data(), values.size()));
  EXPECT_TRUE(math::all_finite(values.data(), 0));
  for (const T special : {std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                          std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::quiet_NaN()})
    for (const std::size_t at : {std::size_t(0), std::size_t(513), values.size() - 1}) {
      const T kept = values[at];
      values[at] = special;
      EXPECT_FALSE(math::all_finite(values.data(), values.size())) << special << " at " << at;
      EXPECT_TRUE(math::all_finite(values.data(), at)) << "the values before " << at;
      values[at] = kept;
    }
}

TEST(AllFinite, FindsEveryInfinityAndNaNAnywhere) {
  every_special_value_is_found<float>();
  every_special_value_is_found<double>();
}

}  // namespace
}  // namespace kpipe
