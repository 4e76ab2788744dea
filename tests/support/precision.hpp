#pragma once
// Checking mixed-precision (bf16 storage, float arithmetic) layers against a float64 reference.
//
// The tolerance is a first-order error bound derived from where rounding happens, element by element:
//  - bf16 inputs and weights are given to both runs as the same values (bf16 numbers are exact in double),
//    so the two runs differ only by what the bf16 run rounds and by its float arithmetic;
//  - each tensor the layer stores in bf16 is rounded once (round to nearest): relative error at most
//    u = 2^-8, bf16's unit roundoff (8 significant bits). A rounded intermediate propagates into what is
//    computed from it: those terms are spelt out per layer (|d output / d intermediate| u |intermediate|);
//  - float arithmetic: every sum here has at most a few hundred terms, so its error is below
//    2^8 x 2^-24 = 2^-16 of the sum of the terms' magnitudes m (and math::fast_exp is within 1.5e-7);
//    the allowance is f m with f = 2^-16, 256 times below u.
// So |bf16 result - float64 result| <= u |result| (when the result is rounded) + propagated terms + f m.
// Summing in bf16 instead of float (errors up to k u m) or rounding where the definition does not
// (an extra u |intermediate|) breaks it.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe::test {

constexpr double bf16_roundoff = 0x1p-8;    // u
constexpr double float_allowance = 0x1p-16;  // f

// The elements of a view, as doubles (bf16 widened exactly), in memory order.
template <class V> std::vector<double> host_values(const V& v) {
  auto h = Kokkos::create_mirror(HostSpace(), v);
  Kokkos::deep_copy(h, v);
  std::vector<double> out(h.span());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = double(widen<float>(h.data()[i]));
  return out;
}

// Fills a view of any element type with uniform values in [lo, hi) rounded to E, and returns them exactly.
template <class V> std::vector<double> fill(const V& v, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  using E = typename V::non_const_value_type;
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::size_t i = 0; i < h.span(); ++i) {
    if constexpr (std::is_same_v<E, double>)
      h.data()[i] = dist(gen);
    else
      h.data()[i] = E(float(dist(gen)));
  }
  Kokkos::deep_copy(v, h);
  return host_values(v);
}

// Writes exactly these values (already representable) into a view.
template <class V> void assign(const V& v, const std::vector<double>& values) {
  using E = typename V::non_const_value_type;
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < h.span(); ++i) {
    if constexpr (std::is_same_v<E, double>)
      h.data()[i] = values.at(i);
    else
      h.data()[i] = E(float(values.at(i)));
  }
  Kokkos::deep_copy(v, h);
}

// Expects |got - reference| <= rounded + f * magnitude for every element, where `rounded` holds each
// element's rounding terms (u |reference| for a tensor stored in bf16, plus what rounded intermediates
// propagate; 0 for one kept in float) and `magnitude` the sum of the magnitudes of the terms that make it.
// Reports the worst element and how close the worst one came (the ratio error / bound).
inline void expect_within(const std::string& what, const std::vector<double>& got, const std::vector<double>& reference,
                          const std::vector<double>& rounded, const std::vector<double>& magnitude) {
  ASSERT_EQ(got.size(), reference.size()) << what;
  ASSERT_EQ(rounded.size(), reference.size()) << what;
  ASSERT_EQ(magnitude.size(), reference.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    const double bound = rounded[i] + float_allowance * magnitude[i] + 1e-300;
    const double ratio = std::abs(got[i] - reference[i]) / bound;
    if (ratio > worst) worst = ratio, at = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << at << " of " << got.size() << ": got " << got[at]
                        << ", float64 " << reference[at] << ", bound " << rounded[at] + float_allowance * magnitude[at];
  ::testing::Test::RecordProperty(what + " worst error / bound", std::to_string(worst));
}

// u |x| for each element: the rounding terms of a tensor stored in bf16 that is computed from exact inputs.
inline std::vector<double> rounded_once(const std::vector<double>& x) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = bf16_roundoff * std::abs(x[i]);
  return r;
}

inline std::vector<double> zeros_like(const std::vector<double>& x) { return std::vector<double>(x.size(), 0.0); }

}  // namespace kpipe::test
