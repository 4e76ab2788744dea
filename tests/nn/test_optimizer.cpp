#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "support/gradcheck.hpp"

namespace kpipe::nn {
namespace {

OptimizerConfig schedule_config() {
  OptimizerConfig cfg;
  cfg.lr = 1e-3;
  cfg.min_lr = 1e-4;
  cfg.warmup_steps = 10;
  cfg.decay_steps = 0;
  return cfg;
}

TEST(Optimizer, LearningRateWarmsUpThenFollowsCosine) {
  auto cfg = schedule_config();
  const std::int64_t total = 110;  // 10 warm-up steps, then 100 of cosine decay
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 0, total), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 4, total), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 9, total), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 10, total), 1e-3);
  EXPECT_NEAR(learning_rate(cfg, 60, total), 5.5e-4, 1e-15);  // halfway: (lr + min_lr) / 2
  EXPECT_NEAR(learning_rate(cfg, 35, total), 1e-4 + 0.45e-3 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_GT(learning_rate(cfg, 109, total), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 110, total), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 500, total), 1e-4);
  for (std::int64_t s = 10; s < 110; ++s) EXPECT_LT(learning_rate(cfg, s + 1, total), learning_rate(cfg, s, total));

  cfg.decay_steps = 50;  // decay over 50 steps, then the floor, whatever total_steps says
  EXPECT_NEAR(learning_rate(cfg, 35, total), 5.5e-4, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 60, total), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 100, total), 1e-4);

  cfg.warmup_steps = 0;  // no warm-up: the peak at step 0
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 0, total), 1e-3);

  cfg.warmup_steps = -1;
  EXPECT_THROW(learning_rate(cfg, 0, total), InputError);
}

TEST(Optimizer, ClipFactor) {
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0);   // under the bound
  EXPECT_EQ(clip_factor(1.0, 1.0), 1.0);   // at the bound
  EXPECT_DOUBLE_EQ(clip_factor(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_LT(4.0 * clip_factor(4.0, 1.0), 1.0);  // the clipped norm is just under the bound
  EXPECT_EQ(clip_factor(4.0, 0.0), 1.0);   // disabled
  EXPECT_EQ(clip_factor(4.0, -1.0), 1.0);  // disabled
}

TEST(Optimizer, SumSquaresMatchesHost) {
  ExecSpace space;
  View1<double> x("x", 1001);
  View1<float> xf("xf", 777);
  test::fill_uniform(x, 1, -3.0, 3.0);
  test::fill_uniform(xf, 2, -3.0, 3.0);
  const double expected = test::dot(x, x), expected_f = test::dot(xf, xf);
  EXPECT_NEAR(sum_squares<double>(space, x), expected, 1e-12 * expected);
  EXPECT_NEAR(sum_squares<float>(space, xf), expected_f, 1e-12 * expected_f);  // accumulated in double
  EXPECT_EQ(sum_squares<double>(space, View1<double>("empty", 0)), 0.0);
}

struct FlatBuffers {
  View1<double> params, grads, state_a, state_b;
  View1<std::uint8_t> mask;
};

FlatBuffers make_buffers(int n) {
  FlatBuffers b{View1<double>("params", n), View1<double>("grads", n), View1<double>("state_a", n),
                View1<double>("state_b", n), View1<std::uint8_t>("mask", n)};
  test::fill_uniform(b.params, 11);
  auto mask = Kokkos::create_mirror_view(b.mask);
  for (int i = 0; i < n; ++i) mask(i) = i % 3 == 0 ? 0 : 1;  // some elements exempt from decay
  Kokkos::deep_copy(b.mask, mask);
  return b;
}

std::vector<double> to_vector(const View1<double>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.extent(0));
}

TEST(Optimizer, AdamWMatchesHostReference) {
  const int n = 50;
  ExecSpace space;
  OptimizerConfig cfg;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.9;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.3;
  auto b = make_buffers(n);
  auto p = to_vector(b.params);
  std::vector<double> m(n, 0.0), v(n, 0.0);
  auto mask = Kokkos::create_mirror_view_and_copy(HostSpace(), b.mask);
  const double grad_scale = 0.5;
  for (int step = 1; step <= 4; ++step) {
    const double lr = 0.01 * step;
    test::fill_uniform(b.grads, 100 + step);
    const auto g = to_vector(b.grads);
    adamw_update(space, cfg, lr, step, grad_scale, b.params, b.grads, b.state_a, b.state_b, b.mask);
    for (int i = 0; i < n; ++i) {
      const double gi = grad_scale * g[i];
      m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * gi;
      v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(cfg.beta1, step));
      const double vhat = v[i] / (1 - std::pow(cfg.beta2, step));
      p[i] -= lr * mhat / (std::sqrt(vhat) + cfg.eps) + lr * cfg.weight_decay * mask(i) * p[i];
    }
    const auto dp = to_vector(b.params), dm = to_vector(b.state_a), dv = to_vector(b.state_b);
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(dp[i], p[i], 1e-13) << "step " << step << " element " << i;
      EXPECT_NEAR(dm[i], m[i], 1e-15) << "step " << step << " element " << i;
      EXPECT_NEAR(dv[i], v[i], 1e-15) << "step " << step << " element " << i;
    }
  }
}

// With a look-ahead L the step applies the bias-corrected first moment extrapolated L steps on,
// m^ + L (m^ - the previous step's m^), from the second step on; the moments themselves are AdamW's.
TEST(Optimizer, AdamWLookAheadExtrapolatesTheFirstMoment) {
  const int n = 30;
  const double lookahead = 2;
  ExecSpace space;
  OptimizerConfig cfg;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.9;
  cfg.weight_decay = 0.3;
  auto b = make_buffers(n);
  auto plain = make_buffers(n);  // the same steps without look-ahead: they must differ from the second on
  auto p = to_vector(b.params);
  std::vector<double> m(n, 0.0), v(n, 0.0);
  auto mask = Kokkos::create_mirror_view_and_copy(HostSpace(), b.mask);
  for (int step = 1; step <= 4; ++step) {
    const double lr = 0.01 * step;
    test::fill_uniform(b.grads, 300 + step);
    Kokkos::deep_copy(plain.grads, b.grads);
    const auto g = to_vector(b.grads);
    adamw_update(space, cfg, lr, step, 1.0, b.params, b.grads, b.state_a, b.state_b, b.mask, lookahead);
    adamw_update(space, cfg, lr, step, 1.0, plain.params, plain.grads, plain.state_a, plain.state_b, plain.mask);
    for (int i = 0; i < n; ++i) {
      const double mhat_before = step > 1 ? m[i] / (1 - std::pow(cfg.beta1, step - 1)) : 0.0;
      m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * g[i];
      v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(cfg.beta1, step));
      const double direction = step > 1 ? mhat + lookahead * (mhat - mhat_before) : mhat;
      const double vhat = v[i] / (1 - std::pow(cfg.beta2, step));
      p[i] -= lr * direction / (std::sqrt(vhat) + cfg.eps) + lr * cfg.weight_decay * mask(i) * p[i];
    }
    const auto dp = to_vector(b.params), dm = to_vector(b.state_a), other = to_vector(plain.params);
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(dp[i], p[i], 1e-13) << "step " << step << " element " << i;
      EXPECT_NEAR(dm[i], m[i], 1e-15) << "step " << step << " element " << i;
      if (step == 1)
        EXPECT_EQ(dp[i], other[i]) << "element " << i;  // no previous moment: nothing to extrapolate
      else
        EXPECT_NE(dp[i], other[i]) << "step " << step << " element " << i;
    }
  }
}

TEST(Optimizer, AdamWDecaysOnlyMaskedParameters) {
  const int n = 9;
  ExecSpace space;
  OptimizerConfig cfg;
  cfg.weight_decay = 0.5;
  auto b = make_buffers(n);  // zero gradients: only the decay moves anything
  const auto before = to_vector(b.params);
  adamw_update(space, cfg, 0.1, 1, 1.0, b.params, b.grads, b.state_a, b.state_b, b.mask);
  const auto after = to_vector(b.params);
  for (int i = 0; i < n; ++i) {
    if (i % 3 == 0)
      EXPECT_EQ(after[i], before[i]) << i;
    else
      EXPECT_NEAR(after[i], before[i] * (1 - 0.1 * 0.5), 1e-15) << i;
  }
}

// SGD with momentum (and a look-ahead L: the step takes buf + L (buf - the buffer before)) against a host
// reference in double.
void check_sgd_against_host(double lookahead) {
  const int n = 40;
  ExecSpace space;
  OptimizerConfig cfg;
  cfg.momentum = 0.7;
  cfg.weight_decay = 0.2;
  auto b = make_buffers(n);
  auto p = to_vector(b.params);
  std::vector<double> buf(n, 0.0);
  auto mask = Kokkos::create_mirror_view_and_copy(HostSpace(), b.mask);
  const double grad_scale = 2.0;
  for (int step = 1; step <= 4; ++step) {
    const double lr = 0.05 / step;
    test::fill_uniform(b.grads, 200 + step);
    const auto g = to_vector(b.grads);
    sgd_update(space, cfg, lr, grad_scale, b.params, b.grads, b.state_a, b.mask, lookahead);
    for (int i = 0; i < n; ++i) {
      const double before = buf[i];
      buf[i] = cfg.momentum * buf[i] + grad_scale * g[i] + cfg.weight_decay * mask(i) * p[i];
      p[i] -= lr * (buf[i] + lookahead * (buf[i] - before));
    }
    const auto dp = to_vector(b.params), dbuf = to_vector(b.state_a);
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(dp[i], p[i], 1e-14) << "look-ahead " << lookahead << " step " << step << " element " << i;
      EXPECT_NEAR(dbuf[i], buf[i], 1e-14) << "look-ahead " << lookahead << " step " << step << " element " << i;
    }
  }
}

TEST(Optimizer, SgdMomentumMatchesHostReference) { check_sgd_against_host(0); }

TEST(Optimizer, SgdLookAheadExtrapolatesTheMomentum) { check_sgd_against_host(3); }

template <class T> std::vector<T> host_values(const View1<T>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<T>(h.data(), h.data() + h.extent(0));
}

template <class T> View1<T> copy_of(const View1<T>& v, const char* label) {
  View1<T> copy(std::string(label), v.extent(0));
  Kokkos::deep_copy(copy, v);
  return copy;
}

// The update in one pass (adamw_update_into, sgd_update_into) gives the bits of the plain step, in place or
// into a buffer of its own (the weights it reads then stay as they were), with or without a look-ahead, and
// leaves the gradients zero. In float and double, over more than two host blocks (the vectorized loops and
// their tails).
template <class T> void expect_into_matches_plain_update(OptimizerKind kind, bool in_place, double lookahead) {
  const std::int64_t n = 5000;
  const std::string what = std::string(kind == OptimizerKind::sgd ? "sgd" : "adamw") +
                           (in_place ? " in place " : " apart ") + type_name<T>() + " look-ahead " +
                           std::to_string(lookahead);
  ExecSpace space;
  OptimizerConfig cfg;
  cfg.kind = kind;
  View1<T> params("params", n), grads("grads", n), m("m", n), v("v", n);
  View1<std::uint8_t> mask("mask", n);
  test::fill_uniform(params, 41);
  test::fill_uniform(m, 43, -0.1, 0.1);
  test::fill_uniform(v, 44, 0.0, 0.1);
  auto host_mask = Kokkos::create_mirror_view(mask);
  for (std::int64_t i = 0; i < n; ++i) host_mask(i) = i % 7 == 0 ? 0 : 1;
  Kokkos::deep_copy(mask, host_mask);
  View1<T> p_into = copy_of(params, "p_into"), m_into = copy_of(m, "m_into"), v_into = copy_of(v, "v_into");
  const View1<T> next = in_place ? p_into : View1<T>("next", n);
  for (int step = 1; step <= 3; ++step) {
    test::fill_uniform(grads, 50 + step);
    const View1<T> g_into = copy_of(grads, "g_into");
    const auto weights_before = host_values(p_into);
    if (kind == OptimizerKind::sgd) {
      sgd_update(space, cfg, 0.05, 0.5, params, grads, m, mask, lookahead);
      sgd_update_into(space, cfg, 0.05, 0.5, p_into, next, g_into, m_into, mask, lookahead);
    } else {
      adamw_update(space, cfg, 1e-2, step, 0.5, params, grads, m, v, mask, lookahead);
      adamw_update_into(space, cfg, 1e-2, step, 0.5, p_into, next, g_into, m_into, v_into, mask, lookahead);
    }
    EXPECT_EQ(host_values(next), host_values(params)) << what << " step " << step;
    EXPECT_EQ(host_values(m_into), host_values(m)) << what << " step " << step;
    if (kind == OptimizerKind::adamw) {
      EXPECT_EQ(host_values(v_into), host_values(v)) << what << " step " << step;
    }
    EXPECT_EQ(host_values(g_into), std::vector<T>(n, T(0))) << what << ": the gradients are zeroed";
    if (!in_place) {
      EXPECT_EQ(host_values(p_into), weights_before) << what << ": the weights read are left as they were";
      Kokkos::deep_copy(p_into, next);  // the next step reads the new weights, as the next update would
    }
  }
}

TEST(Optimizer, UpdateIntoMatchesThePlainUpdateBitForBit) {
  for (const OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::sgd})
    for (const bool in_place : {true, false})
      for (const double lookahead : {0.0, 2.0}) {
        expect_into_matches_plain_update<float>(kind, in_place, lookahead);
        expect_into_matches_plain_update<double>(kind, in_place, lookahead);
      }
}

TEST(Optimizer, UpdateIntoRefusesOverlappingBuffers) {
  ExecSpace space;
  OptimizerConfig cfg;
  auto b = make_buffers(8);
  const View1<double> wide("wide", 9);
  const auto from = Kokkos::subview(wide, Kokkos::make_pair(0, 8)), into = Kokkos::subview(wide, Kokkos::make_pair(1, 9));
  EXPECT_THROW(adamw_update_into<double>(space, cfg, 0.1, 1, 1.0, from, into, b.grads, b.state_a, b.state_b, b.mask),
               std::invalid_argument);
  EXPECT_THROW(sgd_update_into<double>(space, cfg, 0.1, 1.0, from, into, b.grads, b.state_a, b.mask), std::invalid_argument);
  EXPECT_THROW(adamw_update_into(space, cfg, 0.1, 1, 1.0, View1<double>("short", 7), b.params, b.grads, b.state_a,
                                 b.state_b, b.mask),
               std::invalid_argument);
}

TEST(Optimizer, RejectsMisuse) {
  ExecSpace space;
  OptimizerConfig cfg;
  auto b = make_buffers(4);
  View1<double> short_state("short", 3);
  EXPECT_THROW(adamw_update(space, cfg, 0.1, 0, 1.0, b.params, b.grads, b.state_a, b.state_b, b.mask),
               std::invalid_argument);  // steps are 1-based
  EXPECT_THROW(adamw_update(space, cfg, 0.1, 1, 1.0, b.params, b.grads, short_state, b.state_b, b.mask),
               std::invalid_argument);
  EXPECT_THROW(sgd_update(space, cfg, 0.1, 1.0, b.params, b.grads, short_state, b.mask), std::invalid_argument);
  cfg.beta2 = 1.0;  // the bias correction would divide by zero
  EXPECT_THROW(adamw_update(space, cfg, 0.1, 1, 1.0, b.params, b.grads, b.state_a, b.state_b, b.mask), InputError);
}

// f(p) = 1/2 sum a_i (p_i - c_i)^2: AdamW with the warm-up/cosine schedule reaches the minimum.
TEST(Optimizer, AdamWMinimizesAQuadratic) {
  const int n = 16, steps = 300;
  ExecSpace space;
  OptimizerConfig cfg;
  cfg.lr = 0.1;
  cfg.min_lr = 1e-4;
  cfg.warmup_steps = 10;
  cfg.weight_decay = 0;
  View1<double> params("params", n), grads("grads", n), m("m", n), v("v", n), a("a", n), c("c", n);
  View1<std::uint8_t> mask("mask", n);
  test::fill_uniform(a, 31, 0.5, 2.0);
  test::fill_uniform(c, 32, -1.0, 1.0);
  auto ha = Kokkos::create_mirror_view_and_copy(HostSpace(), a);
  auto hc = Kokkos::create_mirror_view_and_copy(HostSpace(), c);
  auto hp = Kokkos::create_mirror_view(params);
  auto hg = Kokkos::create_mirror_view(grads);
  auto objective = [&] {
    Kokkos::deep_copy(hp, params);
    double f = 0;
    for (int i = 0; i < n; ++i) {
      f += 0.5 * ha(i) * (hp(i) - hc(i)) * (hp(i) - hc(i));
      hg(i) = ha(i) * (hp(i) - hc(i));
    }
    Kokkos::deep_copy(grads, hg);
    return f;
  };
  const double initial = objective();
  for (int step = 0; step < steps; ++step) {
    objective();
    adamw_update(space, cfg, learning_rate(cfg, step, steps), step + 1, 1.0, params, grads, m, v, mask);
  }
  const double final_value = objective();
  EXPECT_LT(final_value, 1e-6 * initial);
  Kokkos::deep_copy(hp, params);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(hp(i), hc(i), 1e-3) << i;
}

}  // namespace
}  // namespace kpipe::nn
