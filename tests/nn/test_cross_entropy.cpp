#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/nn/cross_entropy.hpp"
#include "support/gradcheck.hpp"

namespace kpipe::nn {
namespace {

constexpr int rows = 6, classes = 7;

View1<Token> make_targets(std::vector<Token> values) {
  View1<Token> targets("targets", values.size());
  auto host = Kokkos::create_mirror_view(targets);
  for (std::size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(targets, host);
  return targets;
}

// Every column as a target somewhere, the first and last included.
const std::vector<Token> target_values{0, 6, 3, 1, 5, 6};

// log(sum exp) - target logit, in long double, straight from the definition.
std::vector<double> reference_losses(const View2<double>& logits, const std::vector<Token>& targets) {
  auto x = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
  std::vector<double> losses(x.extent(0));
  for (std::size_t i = 0; i < x.extent(0); ++i) {
    long double sum = 0;
    for (std::size_t j = 0; j < x.extent(1); ++j) sum += std::exp((long double)x(i, j));
    losses[i] = double(std::log(sum) - x(i, targets[i]));
  }
  return losses;
}

TEST(CrossEntropy, ForwardMatchesNaiveReference) {
  View2<double> logits("logits", rows, classes);
  View1<double> losses("losses", rows);
  test::fill_uniform(logits, 1, -3.0, 3.0);
  cross_entropy_forward(ExecSpace(), logits, make_targets(target_values), losses);
  const auto ref = reference_losses(logits, target_values);
  auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), losses);
  for (int i = 0; i < rows; ++i) EXPECT_NEAR(got(i), ref[i], 1e-13) << "row " << i;
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  View2<double> logits("logits", rows, classes), dlogits("dlogits", rows, classes);
  View1<double> losses("losses", rows);
  test::fill_uniform(logits, 2, -3.0, 3.0);
  const auto targets = make_targets(target_values);
  const double scale = 0.25;
  // L = scale * sum(losses): the mean loss when scale is 1 / rows.
  auto loss = [&] {
    cross_entropy_forward(ExecSpace(), logits, targets, losses);
    View1<double> ones("ones", rows);
    Kokkos::deep_copy(ones, scale);
    return test::dot(losses, ones);
  };
  cross_entropy_backward_input(ExecSpace(), logits, targets, scale, dlogits);
  test::expect_gradient("dlogits", logits, dlogits, loss, rows * classes);
}

TEST(CrossEntropy, BackwardWorksInPlace) {
  View2<double> logits("logits", rows, classes), expected("expected", rows, classes);
  test::fill_uniform(logits, 3, -3.0, 3.0);
  const auto targets = make_targets(target_values);
  cross_entropy_backward_input(ExecSpace(), logits, targets, 0.5, expected);
  cross_entropy_backward_input(ExecSpace(), logits, targets, 0.5, logits);
  auto want = Kokkos::create_mirror_view_and_copy(HostSpace(), expected);
  auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < classes; ++j) EXPECT_EQ(got(i, j), want(i, j)) << i << ", " << j;
}

// Softmax is shift-invariant: logits around 1000 (exp overflows even double) give the same loss and
// gradient as the same logits around 0.
template <class T> void expect_large_logits_are_stable(double tolerance) {
  View2<T> small("small", rows, classes), large("large", rows, classes), dsmall("dsmall", rows, classes),
      dlarge("dlarge", rows, classes);
  View1<T> loss_small("loss_small", rows), loss_large("loss_large", rows);
  test::fill_uniform(small, 4, -3.0, 3.0);
  auto hs = Kokkos::create_mirror_view_and_copy(HostSpace(), small);
  auto hl = Kokkos::create_mirror_view(large);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < classes; ++j) hl(i, j) = hs(i, j) + T(1000);
  Kokkos::deep_copy(large, hl);
  // Shifting by 1000 rounds the logits in float; compare with the rounded values shifted back.
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < classes; ++j) hs(i, j) = hl(i, j) - T(1000);
  Kokkos::deep_copy(small, hs);
  const auto targets = make_targets(target_values);
  cross_entropy_forward(ExecSpace(), small, targets, loss_small);
  cross_entropy_forward(ExecSpace(), large, targets, loss_large);
  cross_entropy_backward_input(ExecSpace(), small, targets, T(1), dsmall);
  cross_entropy_backward_input(ExecSpace(), large, targets, T(1), dlarge);
  auto ls = Kokkos::create_mirror_view_and_copy(HostSpace(), loss_small);
  auto ll = Kokkos::create_mirror_view_and_copy(HostSpace(), loss_large);
  auto gs = Kokkos::create_mirror_view_and_copy(HostSpace(), dsmall);
  auto gl = Kokkos::create_mirror_view_and_copy(HostSpace(), dlarge);
  for (int i = 0; i < rows; ++i) {
    ASSERT_TRUE(std::isfinite(ll(i))) << "row " << i;
    EXPECT_NEAR(ll(i), ls(i), tolerance) << "row " << i;
    for (int j = 0; j < classes; ++j) {
      ASSERT_TRUE(std::isfinite(gl(i, j))) << i << ", " << j;
      EXPECT_NEAR(gl(i, j), gs(i, j), tolerance) << i << ", " << j;
    }
  }
}

TEST(CrossEntropy, LargeLogitsDoNotOverflowDouble) { expect_large_logits_are_stable<double>(1e-12); }
TEST(CrossEntropy, LargeLogitsDoNotOverflowFloat) { expect_large_logits_are_stable<float>(1e-3); }

TEST(CrossEntropy, FloatIsCloseToDouble) {
  View2<double> logits("logits", rows, classes), dlogits("dlogits", rows, classes);
  View2<float> logits_f("logits_f", rows, classes), dlogits_f("dlogits_f", rows, classes);
  View1<double> losses("losses", rows);
  View1<float> losses_f("losses_f", rows);
  test::fill_uniform(logits, 5, -3.0, 3.0);
  auto hd = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
  auto hf = Kokkos::create_mirror_view(logits_f);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < classes; ++j) hf(i, j) = float(hd(i, j));
  Kokkos::deep_copy(logits_f, hf);
  const auto targets = make_targets(target_values);
  cross_entropy_forward(ExecSpace(), logits, targets, losses);
  cross_entropy_forward(ExecSpace(), logits_f, targets, losses_f);
  cross_entropy_backward_input(ExecSpace(), logits, targets, 1.0, dlogits);
  cross_entropy_backward_input(ExecSpace(), logits_f, targets, 1.0f, dlogits_f);
  auto ld = Kokkos::create_mirror_view_and_copy(HostSpace(), losses);
  auto lf = Kokkos::create_mirror_view_and_copy(HostSpace(), losses_f);
  auto gd = Kokkos::create_mirror_view_and_copy(HostSpace(), dlogits);
  auto gf = Kokkos::create_mirror_view_and_copy(HostSpace(), dlogits_f);
  for (int i = 0; i < rows; ++i) {
    EXPECT_NEAR(lf(i), ld(i), 1e-5) << "row " << i;
    for (int j = 0; j < classes; ++j) EXPECT_NEAR(gf(i, j), gd(i, j), 1e-6) << i << ", " << j;
  }
}

TEST(CrossEntropy, OutOfRangeTargetGivesNaNLoss) {
  View2<double> logits("logits", 2, classes);
  View1<double> losses("losses", 2);
  test::fill_uniform(logits, 6);
  cross_entropy_forward(ExecSpace(), logits, make_targets({classes, 2}), losses);
  auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), losses);
  EXPECT_TRUE(std::isnan(got(0)));
  EXPECT_TRUE(std::isfinite(got(1)));
}

TEST(CrossEntropy, RejectsMismatchedShapes) {
  View2<double> logits("logits", rows, classes), dlogits("dlogits", rows, classes + 1);
  View1<double> losses("losses", rows - 1);
  const auto targets = make_targets(target_values);
  EXPECT_THROW(cross_entropy_forward(ExecSpace(), logits, targets, losses), InputError);
  EXPECT_THROW(cross_entropy_backward_input(ExecSpace(), logits, targets, 1.0, dlogits), InputError);
  EXPECT_THROW(cross_entropy_forward(ExecSpace(), logits, make_targets({0, 1}), View1<double>("l", rows)),
               InputError);
}

}  // namespace
}  // namespace kpipe::nn
