#pragma once
// Finite-difference checks of hand-written gradients, in double.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "kpipe/core/tensor.hpp"

namespace kpipe::test {

// Fills a view with uniform numbers in [lo, hi) from a host RNG (tests only).
template <class V> void fill_uniform(const V& v, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  auto host = Kokkos::create_mirror_view(v);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  auto* p = host.data();
  for (std::size_t i = 0; i < host.span(); ++i) p[i] = static_cast<typename V::non_const_value_type>(dist(gen));
  Kokkos::deep_copy(v, host);
}

// sum(a * b) over all elements, on the host (tests only).
template <class A, class B> double dot(const A& a, const B& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double s = 0;
  for (std::size_t i = 0; i < ha.span(); ++i) s += double(ha.data()[i]) * double(hb.data()[i]);
  return s;
}

// Compares the analytic gradient `grad` of `loss()` with respect to `x` against central differences at
// `samples` evenly spread elements (all of them when the tensor is smaller).
template <class X, class G>
void expect_gradient(const std::string& what, const X& x, const G& grad, const std::function<double()>& loss,
                     int samples = 24, double eps = 1e-5, double rtol = 1e-5, double atol = 1e-8) {
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
  const std::size_t n = hx.span();
  ASSERT_GT(n, 0u) << what;
  const std::size_t stride = n <= std::size_t(samples) ? 1 : n / samples;
  int checked = 0;
  for (std::size_t i = (n <= std::size_t(samples) ? 0 : stride / 2); i < n; i += stride) {
    const double orig = hx.data()[i];
    hx.data()[i] = orig + eps;
    Kokkos::deep_copy(x, hx);
    const double up = loss();
    hx.data()[i] = orig - eps;
    Kokkos::deep_copy(x, hx);
    const double down = loss();
    hx.data()[i] = orig;
    Kokkos::deep_copy(x, hx);
    const double numeric = (up - down) / (2 * eps);
    const double analytic = hg.data()[i];
    EXPECT_NEAR(analytic, numeric, atol + rtol * std::max(std::abs(numeric), 1.0))
        << what << " element " << i << " of " << n;
    ++checked;
  }
  EXPECT_GT(checked, 0) << what;
}

}  // namespace kpipe::test
