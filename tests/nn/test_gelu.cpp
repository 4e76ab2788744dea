#include <gtest/gtest.h>

#include <cmath>

#include "kpipe/nn/gelu.hpp"
#include "support/gradcheck.hpp"

namespace kpipe::nn {
namespace {

double host_gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ForwardMatchesTanhFormula) {
  const int n = 3, f = 5;
  ExecSpace space;
  View2<double> x("x", n, f), y("y", n, f);
  auto hx = Kokkos::create_mirror_view(x);
  const double values[n * f] = {-20, -5, -2, -1, -0.5, -0.1, 0, 1e-3, 0.1, 0.5, 1, 2, 3, 5, 20};
  for (int i = 0; i < n * f; ++i) hx(i / f, i % f) = values[i];
  Kokkos::deep_copy(x, hx);
  gelu_forward(space, x, y);
  auto hy = Kokkos::create_mirror_view_and_copy(HostSpace(), y);
  for (int i = 0; i < n * f; ++i) EXPECT_NEAR(hy(i / f, i % f), host_gelu(values[i]), 1e-15) << values[i];
  EXPECT_NEAR(hy(2, 0), 0.8411919906082768, 1e-15);  // gelu(1), tanh form
  EXPECT_NEAR(hy(0, 0), 0.0, 1e-200);  // saturates to 0 on the left
  EXPECT_EQ(hy(2, 4), 20.0);           // and to x on the right
}

TEST(Gelu, GradientMatchesFiniteDifferences) {
  const int n = 4, f = 6;
  ExecSpace space;
  View2<double> x("x", n, f), y("y", n, f), r("r", n, f), dx("dx", n, f);
  test::fill_uniform(x, 21, -4.0, 4.0);
  test::fill_uniform(r, 22);
  auto loss = [&] {
    gelu_forward(space, x, y);
    return test::dot(y, r);
  };
  gelu_backward_input(space, x, r, dx);
  test::expect_gradient("dx", x, dx, loss, n * f);
}

// The fused bias + GeLU gives the same bits as adding the bias and then applying GeLU, and leaves the biased
// pre-activation in f (what backward reads).
TEST(Gelu, BiasGeluMatchesBiasThenGelu) {
  const int n = 7, f = 37;  // a width that is not a multiple of any vector length
  ExecSpace space;
  View2<float> fused("fused", n, f), g("g", n, f), expected_f("expected_f", n, f), expected_g("expected_g", n, f);
  View1<float> bias("bias", f);
  test::fill_uniform(fused, 31, -6.0f, 6.0f);
  test::fill_uniform(bias, 32, -1.0f, 1.0f);
  auto hf = Kokkos::create_mirror_view_and_copy(HostSpace(), fused);
  auto hb = Kokkos::create_mirror_view_and_copy(HostSpace(), bias);
  auto he = Kokkos::create_mirror_view(expected_f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < f; ++j) he(i, j) = hf(i, j) + hb(j);
  Kokkos::deep_copy(expected_f, he);
  gelu_forward(space, expected_f, expected_g);
  bias_gelu_forward(space, bias, fused, g);
  auto got_f = Kokkos::create_mirror_view_and_copy(HostSpace(), fused);
  auto got_g = Kokkos::create_mirror_view_and_copy(HostSpace(), g);
  auto want_g = Kokkos::create_mirror_view_and_copy(HostSpace(), expected_g);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < f; ++j) {
      ASSERT_EQ(got_f(i, j), he(i, j)) << i << ", " << j;
      ASSERT_EQ(got_g(i, j), want_g(i, j)) << i << ", " << j;
    }
}

// The float instantiation computes the same function to a few ulps, saturating cleanly at both ends.
TEST(Gelu, FloatAgreesWithDouble) {
  const int n = 16, f = 32;
  ExecSpace space;
  View2<float> xf("xf", n, f), yf("yf", n, f), dyf("dyf", n, f), dxf("dxf", n, f);
  View2<double> x("x", n, f), y("y", n, f), dy("dy", n, f), dx("dx", n, f);
  test::fill_uniform(xf, 23, -8.0, 8.0);
  test::fill_uniform(dyf, 24);
  auto hxf = Kokkos::create_mirror_view_and_copy(HostSpace(), xf);
  auto hdyf = Kokkos::create_mirror_view_and_copy(HostSpace(), dyf);
  auto hx = Kokkos::create_mirror_view(x);
  auto hdy = Kokkos::create_mirror_view(dy);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < f; ++j) {
      hx(i, j) = hxf(i, j);
      hdy(i, j) = hdyf(i, j);
    }
  Kokkos::deep_copy(x, hx);
  Kokkos::deep_copy(dy, hdy);
  gelu_forward(space, xf, yf);
  gelu_backward_input(space, xf, dyf, dxf);
  gelu_forward(space, x, y);
  gelu_backward_input(space, x, dy, dx);
  auto hyf = Kokkos::create_mirror_view_and_copy(HostSpace(), yf);
  auto hdxf = Kokkos::create_mirror_view_and_copy(HostSpace(), dxf);
  auto hy = Kokkos::create_mirror_view_and_copy(HostSpace(), y);
  auto hdx = Kokkos::create_mirror_view_and_copy(HostSpace(), dx);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < f; ++j) {
      // A few float ulps; computing 1 - s by subtraction near s = 1 would be off by 1e-6 in dx.
      EXPECT_NEAR(hyf(i, j), hy(i, j), 3e-7 * (1 + std::abs(hy(i, j)))) << hx(i, j);
      EXPECT_NEAR(hdxf(i, j), hdx(i, j), 3e-7 * (1 + std::abs(hdx(i, j)))) << hx(i, j);
    }
}

// Far out on either side exp(-2u) overflows or underflows in float: y and dx must still be finite.
TEST(Gelu, FloatSaturatesWithoutNaN) {
  ExecSpace space;
  View2<float> x("x", 1, 4), y("y", 1, 4), dy("dy", 1, 4), dx("dx", 1, 4);
  auto hx = Kokkos::create_mirror_view(x);
  hx(0, 0) = -1e4f;
  hx(0, 1) = -50;
  hx(0, 2) = 50;
  hx(0, 3) = 1e4f;
  Kokkos::deep_copy(x, hx);
  Kokkos::deep_copy(dy, 1.0f);
  gelu_forward(space, x, y);
  gelu_backward_input(space, x, dy, dx);
  auto hy = Kokkos::create_mirror_view_and_copy(HostSpace(), y);
  auto hdx = Kokkos::create_mirror_view_and_copy(HostSpace(), dx);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(hy(0, j), 0.0f) << hx(0, j);
    EXPECT_EQ(hdx(0, j), 0.0f) << hx(0, j);
  }
  for (int j = 2; j < 4; ++j) {
    EXPECT_EQ(hy(0, j), hx(0, j));
    EXPECT_EQ(hdx(0, j), 1.0f) << hx(0, j);
  }
}

}  // namespace
}  // namespace kpipe::nn
