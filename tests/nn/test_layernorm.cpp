#include <gtest/gtest.h>

#include <cmath>

#include "kpipe/nn/layernorm.hpp"
#include "support/gradcheck.hpp"

namespace kpipe::nn {
namespace {

template <class T> LayerNorm<T> make_layernorm(int channels) {
  return LayerNorm<T>{View1<T>("gamma", channels), View1<T>("beta", channels), View1<T>("dgamma", channels),
                      View1<T>("dbeta", channels)};
}

// A host copy that does not alias the view (create_mirror_view would, on a host backend).
template <class V> auto snapshot(const V& v) {
  auto copy = Kokkos::create_mirror(HostSpace(), v);
  Kokkos::deep_copy(copy, v);
  return copy;
}

TEST(LayerNorm, ForwardMatchesHostComputation) {
  const int n = 6, c = 10;
  ExecSpace space;
  auto ln = make_layernorm<double>(c);
  View2<double> x("x", n, c), y("y", n, c);
  View1<double> mean("mean", n), rstd("rstd", n);
  test::fill_uniform(ln.gamma, 1, 0.5, 1.5);
  test::fill_uniform(ln.beta, 2);
  test::fill_uniform(x, 3, -2.0, 3.0);
  forward(space, ln, x, y, mean, rstd);
  auto hx = snapshot(x), hy = snapshot(y);
  auto hmean = snapshot(mean), hrstd = snapshot(rstd), hgamma = snapshot(ln.gamma), hbeta = snapshot(ln.beta);
  for (int i = 0; i < n; ++i) {
    double mu = 0;
    for (int j = 0; j < c; ++j) mu += hx(i, j) / c;
    double var = 0;
    for (int j = 0; j < c; ++j) var += (hx(i, j) - mu) * (hx(i, j) - mu) / c;
    const double r = 1 / std::sqrt(var + 1e-5);
    EXPECT_NEAR(hmean(i), mu, 1e-12) << "row " << i;
    EXPECT_NEAR(hrstd(i), r, 1e-12 * r) << "row " << i;
    for (int j = 0; j < c; ++j)
      EXPECT_NEAR(hy(i, j), (hx(i, j) - mu) * r * hgamma(j) + hbeta(j), 1e-12) << i << "," << j;
  }
}

// With gamma = 1, beta = 0 every row comes out with mean 0 and variance var / (var + eps) ~ 1. Run in float
// with rows far from zero: a one-pass E[x^2] - E[x]^2 would lose the variance to cancellation.
TEST(LayerNorm, RowsAreNormalizedEvenFarFromZeroInFloat) {
  const int n = 8, c = 256;
  ExecSpace space;
  auto ln = make_layernorm<float>(c);
  Kokkos::deep_copy(ln.gamma, 1.0f);
  View2<float> x("x", n, c), y("y", n, c);
  View1<float> mean("mean", n), rstd("rstd", n);
  test::fill_uniform(x, 4, 999.0, 1001.0);  // std ~0.58 on top of 1000
  forward(space, ln, x, y, mean, rstd);
  auto hy = snapshot(y);
  auto hmean = snapshot(mean);
  for (int i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (int j = 0; j < c; ++j) mu += hy(i, j) / c;
    for (int j = 0; j < c; ++j) var += (hy(i, j) - mu) * (hy(i, j) - mu) / c;
    // The float mean itself is within half an ulp of 1000 (3e-5), i.e. 5e-5 standard deviations; summing raw
    // values instead would be off by 1e-3. The variance is 1 - eps / var = 1 - 3e-5.
    EXPECT_NEAR(mu, 0.0, 1e-4) << "row " << i;
    EXPECT_NEAR(var, 1.0, 1e-4) << "row " << i;
    EXPECT_NEAR(hmean(i), 1000.0, 0.1) << "row " << i;
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  const int n = 5, c = 9;
  ExecSpace space;
  auto ln = make_layernorm<double>(c);
  View2<double> x("x", n, c), y("y", n, c), r("r", n, c), dx("dx", n, c);
  View1<double> mean("mean", n), rstd("rstd", n);
  test::fill_uniform(ln.gamma, 5, 0.5, 1.5);
  test::fill_uniform(ln.beta, 6);
  test::fill_uniform(x, 7);
  test::fill_uniform(r, 8);
  // L = sum(y * r), so dL/dy = r.
  auto loss = [&] {
    forward(space, ln, x, y, mean, rstd);
    return test::dot(y, r);
  };
  loss();
  backward_input(space, ln, x, mean, rstd, r, dx);
  backward_weight(space, ln, x, mean, rstd, r);
  test::expect_gradient("dx", x, dx, loss, n * c);
  test::expect_gradient("dgamma", ln.gamma, ln.dgamma, loss, c);
  test::expect_gradient("dbeta", ln.beta, ln.dbeta, loss, c);
}

TEST(LayerNorm, BackwardAddsTheResidualsGradient) {
  const int n = 4, c = 7;
  ExecSpace space;
  auto ln = make_layernorm<double>(c);
  View2<double> x("x", n, c), y("y", n, c), dy("dy", n, c), dx("dx", n, c);
  View1<double> mean("mean", n), rstd("rstd", n);
  test::fill_uniform(ln.gamma, 9);
  test::fill_uniform(x, 10);
  test::fill_uniform(dy, 11);
  forward(space, ln, x, y, mean, rstd);

  // backward_input: a residual adds the same gradient that no residual writes, whether it lies in dx (in
  // place) or apart (then it is left as it was, and dx's old values are ignored), to the same bits.
  test::fill_uniform(dx, 12);  // garbage that overwrite must ignore
  backward_input(space, ln, x, mean, rstd, dy, dx);
  auto fresh = snapshot(dx);
  test::fill_uniform(dx, 13);
  auto before = snapshot(dx);
  backward_input(space, ln, x, mean, rstd, dy, dx, dx);
  auto added = snapshot(dx);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < c; ++j) EXPECT_DOUBLE_EQ(added(i, j), before(i, j) + fresh(i, j)) << i << "," << j;
  View2<double> residual("residual", n, c);
  test::fill_uniform(residual, 13);
  test::fill_uniform(dx, 14);
  backward_input(space, ln, x, mean, rstd, dy, dx, residual);
  auto apart = snapshot(dx);
  auto residual_after = snapshot(residual);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < c; ++j) {
      EXPECT_EQ(apart(i, j), added(i, j)) << i << "," << j;
      EXPECT_EQ(residual_after(i, j), before(i, j)) << i << "," << j;
    }

  // backward_weight: a second call adds the same sums again.
  backward_weight(space, ln, x, mean, rstd, dy);
  auto dgamma_once = snapshot(ln.dgamma), dbeta_once = snapshot(ln.dbeta);
  backward_weight(space, ln, x, mean, rstd, dy);
  auto dgamma_twice = snapshot(ln.dgamma), dbeta_twice = snapshot(ln.dbeta);
  for (int j = 0; j < c; ++j) {
    EXPECT_NE(dgamma_once(j), 0.0);
    EXPECT_DOUBLE_EQ(dgamma_twice(j), 2 * dgamma_once(j));
    EXPECT_DOUBLE_EQ(dbeta_twice(j), 2 * dbeta_once(j));
  }
}

}  // namespace
}  // namespace kpipe::nn
