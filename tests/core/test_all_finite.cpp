// all_finite (core/all_finite.hpp): every infinity and NaN found wherever it is, nothing else.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "kpipe/core/all_finite.hpp"

namespace kpipe {
namespace {

template <class T> void every_special_value_is_found() {
  std::vector<T> values(1037);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = T(i) * T(-0.37);
  values[5] = std::numeric_limits<T>::max();
  values[6] = std::numeric_limits<T>::denorm_min();
  EXPECT_TRUE(all_finite(values.data(), values.size()));
  EXPECT_TRUE(all_finite(values.data(), 0));
  for (const T special : {std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                          std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::quiet_NaN()})
    for (const std::size_t at : {std::size_t(0), std::size_t(513), values.size() - 1}) {
      const T kept = values[at];
      values[at] = special;
      EXPECT_FALSE(all_finite(values.data(), values.size())) << special << " at " << at;
      EXPECT_TRUE(all_finite(values.data(), at)) << "the values before " << at;
      values[at] = kept;
    }
}

TEST(AllFinite, FindsEveryInfinityAndNaNAnywhere) {
  every_special_value_is_found<float>();
  every_special_value_is_found<double>();
}

}  // namespace
}  // namespace kpipe
