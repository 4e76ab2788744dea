#include <gtest/gtest.h>

#include "kpipe/nn/linear.hpp"
#include "support/gradcheck.hpp"

namespace kpipe::nn {
namespace {

TEST(Linear, GradientsMatchFiniteDifferences) {
  const int n = 5, in = 7, out = 4;
  ExecSpace space;
  Linear<double> layer{View2<double>("w", out, in), View1<double>("b", out), View2<double>("dw", out, in),
                       View1<double>("db", out)};
  View2<double> x("x", n, in), y("y", n, out), r("r", n, out), dx("dx", n, in);
  test::fill_uniform(layer.weight, 1);
  test::fill_uniform(layer.bias, 2);
  test::fill_uniform(x, 3);
  test::fill_uniform(r, 4);
  // L = sum(y * r), so dL/dy = r.
  auto loss = [&] {
    forward(space, layer, x, y);
    return test::dot(y, r);
  };
  loss();
  backward_input(space, layer, r, dx);
  backward_weight(space, layer, x, r);
  test::expect_gradient("dx", x, dx, loss);
  test::expect_gradient("dweight", layer.weight, layer.dweight, loss);
  test::expect_gradient("dbias", layer.bias, layer.dbias, loss);
}

TEST(Linear, WeightGradientsAccumulate) {
  const int n = 3, in = 2, out = 2;
  ExecSpace space;
  Linear<double> layer{View2<double>("w", out, in), View1<double>("b", out), View2<double>("dw", out, in),
                       View1<double>("db", out)};
  View2<double> x("x", n, in), dy("dy", n, out);
  test::fill_uniform(x, 5);
  test::fill_uniform(dy, 6);
  backward_weight(space, layer, x, dy);
  // A true copy: create_mirror_view would alias the view itself on a host backend.
  auto once = Kokkos::create_mirror(HostSpace(), layer.dweight);
  Kokkos::deep_copy(once, layer.dweight);
  backward_weight(space, layer, x, dy);
  auto twice = Kokkos::create_mirror_view_and_copy(HostSpace(), layer.dweight);
  for (int i = 0; i < out; ++i)
    for (int j = 0; j < in; ++j) EXPECT_DOUBLE_EQ(twice(i, j), 2 * once(i, j));
}

}  // namespace
}  // namespace kpipe::nn
