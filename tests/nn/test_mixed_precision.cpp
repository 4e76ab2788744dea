// Every layer in mixed precision (float arithmetic, bf16 storage: T = float, A = bf16) against the same layer
// in float64 at the same inputs and weights, forward outputs and every gradient, element by element within
// the first-order rounding bound of support/precision.hpp: u |x| for each tensor stored in bf16, what the
// layer's rounded intermediates propagate (spelt out per layer), and f m for float arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kpipe/nn/attention.hpp"
#include "kpipe/nn/cross_entropy.hpp"
#include "kpipe/nn/embedding.hpp"
#include "kpipe/nn/gelu.hpp"
#include "kpipe/nn/head.hpp"
#include "kpipe/nn/layernorm.hpp"
#include "kpipe/nn/linear.hpp"
#include "support/precision.hpp"

namespace kpipe::nn {
namespace {

using test::assign;
using test::expect_within;
using test::fill;
using test::host_values;
using test::rounded_once;
using test::zeros_like;
constexpr double u = test::bf16_roundoff;
constexpr double f = test::float_allowance;

// Row-major element (i, j) of a matrix with `cols` columns.
struct Rows {
  const std::vector<double>& v;
  std::int64_t cols;
  double operator()(std::int64_t i, std::int64_t j) const { return v[std::size_t(i * cols + j)]; }
};

View1<Token> token_ids(std::int64_t n, int vocab, int stride) {
  View1<Token> t("tokens", n);
  auto h = Kokkos::create_mirror_view(t);
  for (std::int64_t i = 0; i < n; ++i) h(i) = Token((i * stride + 11) % vocab);
  Kokkos::deep_copy(t, h);
  return t;
}

TEST(MixedPrecision, LinearWithinItsRoundingBound) {
  const std::int64_t n = 37, in = 70, out = 45;
  ExecSpace space;
  Linear<float, bf16> lo{View2<bf16>("w", out, in), View1<float>("b", out), View2<float>("dw", out, in),
                         View1<float>("db", out),
                         allocate_products<float>(linear_products_size<float, bf16>(n, in, out))};
  Linear<double> hi{View2<double>("w", out, in), View1<double>("b", out), View2<double>("dw", out, in),
                    View1<double>("db", out)};
  const auto w = fill(lo.weight, 1), b = fill(lo.bias, 2);
  assign(hi.weight, w);
  assign(hi.bias, b);
  View2<bf16> x("x", n, in), r("r", n, out), dy("dy", n, out), y("y", n, out), dx("dx", n, in);
  View2<double> x64("x", n, in), r64("r", n, out), dy64("dy", n, out), y64("y", n, out), dx64("dx", n, in);
  const auto xv = fill(x, 3), rv = fill(r, 4), dyv = fill(dy, 5), dx0 = fill(dx, 6);
  assign(x64, xv);
  assign(r64, rv);
  assign(dy64, dyv);
  assign(dx64, dx0);
  const Rows X{xv, in}, W{w, in}, R{rv, out}, DY{dyv, out}, DX0{dx0, in};

  // y = round(x W^T + b + r): rounded once; m = sum |x w| + |b| + |r|.
  std::vector<double> m(n * out), m_plain(n * out);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < out; ++j) {
      double s = std::abs(b[j]);
      for (std::int64_t k = 0; k < in; ++k) s += std::abs(X(i, k) * W(j, k));
      m_plain[i * out + j] = s;
      m[i * out + j] = s + std::abs(R(i, j));
    }
  forward_residual(space, lo, x, r, y);
  forward_residual(space, hi, x64, r64, y64);
  const auto y_ref = host_values(y64);
  expect_within("Linear forward_residual", host_values(y), y_ref, rounded_once(y_ref), m);
  forward(space, lo, x, y);
  forward(space, hi, x64, y64);
  const auto y_plain = host_values(y64);
  expect_within("Linear forward", host_values(y), y_plain, rounded_once(y_plain), m_plain);

  // dx = round(dx0 + dy W): rounded once; m = sum |dy w| + |dx0|.
  backward_input(space, lo, dy, dx, /*accumulate=*/true);
  backward_input(space, hi, dy64, dx64, true);
  std::vector<double> m_dx(n * in);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < in; ++k) {
      double s = std::abs(DX0(i, k));
      for (std::int64_t j = 0; j < out; ++j) s += std::abs(DY(i, j) * W(j, k));
      m_dx[i * in + k] = s;
    }
  const auto dx_ref = host_values(dx64);
  expect_within("Linear backward_input", host_values(dx), dx_ref, rounded_once(dx_ref), m_dx);

  // dW = dy^T x and db = sum dy stay in float: no rounding term at all.
  backward_weight(space, lo, x, dy);
  backward_weight(space, hi, x64, dy64);
  std::vector<double> m_dw(out * in, 0.0), m_db(out, 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < out; ++j) {
      m_db[j] += std::abs(DY(i, j));
      for (std::int64_t k = 0; k < in; ++k) m_dw[j * in + k] += std::abs(DY(i, j) * X(i, k));
    }
  const auto dw_ref = host_values(hi.dweight), db_ref = host_values(hi.dbias);
  expect_within("Linear dweight", host_values(lo.dweight), dw_ref, zeros_like(dw_ref), m_dw);
  expect_within("Linear dbias", host_values(lo.dbias), db_ref, zeros_like(db_ref), m_db);
}

TEST(MixedPrecision, LayerNormWithinItsRoundingBound) {
  const std::int64_t n = 37, c = 70;
  ExecSpace space;
  const float eps = 1e-5f;
  LayerNorm<float, bf16> lo{View1<float>("gamma", c), View1<float>("beta", c), View1<float>("dgamma", c),
                            View1<float>("dbeta", c), eps};
  LayerNorm<double> hi{View1<double>("gamma", c), View1<double>("beta", c), View1<double>("dgamma", c),
                       View1<double>("dbeta", c), double(eps)};
  const auto gamma = fill(lo.gamma, 1, 0.5, 1.5), beta = fill(lo.beta, 2);
  assign(hi.gamma, gamma);
  assign(hi.beta, beta);
  View2<bf16> x("x", n, c), y("y", n, c), dy("dy", n, c), dx("dx", n, c);
  View2<double> x64("x", n, c), y64("y", n, c), dy64("dy", n, c), dx64("dx", n, c);
  View1<float> mean("mean", n), rstd("rstd", n);
  View1<double> mean64("mean", n), rstd64("rstd", n);
  const auto xv = fill(x, 3, -2.0, 3.0), dyv = fill(dy, 4), dx0 = fill(dx, 5);
  assign(x64, xv);
  assign(dy64, dyv);
  assign(dx64, dx0);
  forward(space, lo, x, y, mean, rstd);
  forward(space, hi, x64, y64, mean64, rstd64);
  const auto mu = host_values(mean64), r = host_values(rstd64);
  const Rows X{xv, c}, DY{dyv, c}, DX0{dx0, c};
  auto xhat = [&](std::int64_t i, std::int64_t j) { return (X(i, j) - mu[i]) * r[i]; };

  // Statistics in float: no rounding term. y rounded once; m covers x̂ = (x - mean) rstd's float error.
  std::vector<double> m_mean(n, 0.0), m_y(n * c);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < c; ++j) {
      m_mean[i] += std::abs(X(i, j)) / double(c) + std::abs(X(i, 0)) / double(c);
      m_y[i * c + j] = (std::abs(X(i, j)) + std::abs(mu[i])) * r[i] * std::abs(gamma[j]) + std::abs(beta[j]);
    }
  const auto y_ref = host_values(y64);
  expect_within("LayerNorm forward y", host_values(y), y_ref, rounded_once(y_ref), m_y);
  expect_within("LayerNorm mean", host_values(mean), mu, zeros_like(mu), m_mean);
  expect_within("LayerNorm rstd", host_values(rstd), r, zeros_like(r), r);

  // dx = round(dx0 + rstd (g - mean(g) - x̂ mean(g x̂))), g = gamma dy: rounded once.
  backward_input(space, lo, x, mean, rstd, dy, dx, /*residual=*/dx);
  backward_input(space, hi, x64, mean64, rstd64, dy64, dx64, dx64);
  std::vector<double> m_dx(n * c);
  for (std::int64_t i = 0; i < n; ++i) {
    double mean_g = 0, mean_gx = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      mean_g += std::abs(gamma[j] * DY(i, j)) / double(c);
      mean_gx += std::abs(gamma[j] * DY(i, j) * xhat(i, j)) / double(c);
    }
    for (std::int64_t j = 0; j < c; ++j)
      m_dx[i * c + j] = std::abs(DX0(i, j)) +
                        r[i] * (std::abs(gamma[j] * DY(i, j)) + mean_g + (std::abs(xhat(i, j)) + 1) * mean_gx);
  }
  const auto dx_ref = host_values(dx64);
  expect_within("LayerNorm backward_input", host_values(dx), dx_ref, rounded_once(dx_ref), m_dx);

  // dgamma, dbeta in float.
  backward_weight(space, lo, x, mean, rstd, dy);
  backward_weight(space, hi, x64, mean64, rstd64, dy64);
  std::vector<double> m_dg(c, 0.0), m_db(c, 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < c; ++j) {
      m_dg[j] += std::abs(DY(i, j)) * (std::abs(X(i, j)) * r[i] + std::abs(xhat(i, j)));
      m_db[j] += std::abs(DY(i, j));
    }
  const auto dg_ref = host_values(hi.dgamma), db_ref = host_values(hi.dbeta);
  expect_within("LayerNorm dgamma", host_values(lo.dgamma), dg_ref, zeros_like(dg_ref), m_dg);
  expect_within("LayerNorm dbeta", host_values(lo.dbeta), db_ref, zeros_like(db_ref), m_db);
}

TEST(MixedPrecision, GeluWithinItsRoundingBound) {
  const std::int64_t n = 13, width = 333;
  ExecSpace space;
  View2<bf16> x("x", n, width), y("y", n, width), g("g", n, width), fb("f", n, width), gb("g", n, width);
  View2<double> x64("x", n, width), y64("y", n, width), g64("g", n, width);
  const auto xv = fill(x, 1, -6.0, 6.0), gv = fill(g, 2);
  assign(x64, xv);
  assign(g64, gv);
  // y = round(gelu(x)): |gelu(x)| <= |x| bounds the float error's scale.
  gelu_forward(space, x, y);
  gelu_forward(space, x64, y64);
  std::vector<double> m_y(xv.size()), m_dx(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    m_y[i] = std::abs(xv[i]);
    m_dx[i] = std::abs(gv[i]) * (1 + std::abs(xv[i]) * (1 + xv[i] * xv[i]));  // |dy| (|s| + |2 x s (1-s) u'|)
  }
  const auto y_ref = host_values(y64);
  expect_within("gelu_forward", host_values(y), y_ref, rounded_once(y_ref), m_y);
  // In place, as the block runs it: dx = round(dy gelu'(x)).
  gelu_backward_input(space, x, g, g);
  gelu_backward_input(space, x64, g64, g64);
  const auto dx_ref = host_values(g64);
  expect_within("gelu_backward_input", host_values(g), dx_ref, rounded_once(dx_ref), m_dx);

  // The MLP's epilogue: f = round(p + b), g = round(gelu(p + b)) from a float product p.
  View2<float> p("p", n, width);
  View1<float> bias("bias", width);
  View2<double> f64("f", n, width), gg64("g", n, width);
  View1<double> bias64("bias", width);
  const auto pv = fill(p, 3, -4.0, 4.0), bv = fill(bias, 4);
  assign(f64, pv);
  assign(bias64, bv);
  bias_gelu_forward<float>(space, bias, p, fb, gb);
  bias_gelu_forward(space, bias64, f64, gg64);
  std::vector<double> m_f(pv.size());
  for (std::size_t i = 0; i < pv.size(); ++i) m_f[i] = 2 * (std::abs(pv[i]) + std::abs(bv[i % width]));
  const auto f_ref = host_values(f64), g_ref = host_values(gg64);
  expect_within("bias_gelu_forward f", host_values(fb), f_ref, rounded_once(f_ref), m_f);
  expect_within("bias_gelu_forward g", host_values(gb), g_ref, rounded_once(g_ref), m_f);
}

TEST(MixedPrecision, EmbeddingWithinItsRoundingBound) {
  const int vocab = 50, positions = 12, seq = 9, c = 70, sequences = 4;
  const std::int64_t n = std::int64_t(sequences) * seq;
  ExecSpace space;
  Embedding<float, bf16> lo{View2<float>("token", vocab, c), View2<float>("position", positions, c),
                            View2<float>("dtoken", vocab, c), View2<float>("dposition", positions, c)};
  Embedding<double> hi{View2<double>("token", vocab, c), View2<double>("position", positions, c),
                       View2<double>("dtoken", vocab, c), View2<double>("dposition", positions, c)};
  const auto tok = fill(lo.token, 1), pos = fill(lo.position, 2);
  assign(hi.token, tok);
  assign(hi.position, pos);
  const View1<const Token> tokens = token_ids(n, 7, 37);  // ids repeat: their gradients add up
  View2<bf16> out("out", n, c), dout("dout", n, c);
  View2<double> out64("out", n, c), dout64("dout", n, c);
  forward(space, lo, tokens, seq, out);
  forward(space, hi, tokens, seq, out64);
  const auto ids = Kokkos::create_mirror_view_and_copy(HostSpace(), tokens);
  std::vector<double> m_out(n * c), m_dtok(vocab * c, 0.0), m_dpos(positions * c, 0.0);
  const auto gv = fill(dout, 3);
  assign(dout64, gv);
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < c; ++j) {
      m_out[i * c + j] = std::abs(tok[ids(i) * c + j]) + std::abs(pos[(i % seq) * c + j]);
      m_dtok[ids(i) * c + j] += std::abs(gv[i * c + j]);
      m_dpos[(i % seq) * c + j] += std::abs(gv[i * c + j]);
    }
  const auto out_ref = host_values(out64);
  expect_within("Embedding forward", host_values(out), out_ref, rounded_once(out_ref), m_out);
  backward_weight(space, lo, tokens, seq, dout, allocate_scratch<float>(tokens.extent(0), c));
  backward_weight(space, hi, tokens, seq, dout64, allocate_scratch<double>(tokens.extent(0), c));
  const auto dtok_ref = host_values(hi.dtoken), dpos_ref = host_values(hi.dposition);
  expect_within("Embedding dtoken", host_values(lo.dtoken), dtok_ref, zeros_like(dtok_ref), m_dtok);
  expect_within("Embedding dposition", host_values(lo.dposition), dpos_ref, zeros_like(dpos_ref), m_dpos);
}

TEST(MixedPrecision, CrossEntropyGradientWithinItsRoundingBound) {
  const std::int64_t n = 29, vocab = 300;
  ExecSpace space;
  View2<float> logits("logits", n, vocab);
  View2<double> logits64("logits", n, vocab), dl64("dl", n, vocab);
  const auto lv = fill(logits, 7, -4.0, 4.0);
  assign(logits64, lv);
  const View1<const Token> targets = token_ids(n, int(vocab), 37);
  View2<bf16> dl("dl", n, vocab);
  const float scale = 0.25f;
  // dlogits = round(scale (softmax - onehot)), in float until the rounding; m = scale (p + onehot)
  // (1 + max |logit|) covers the exponentials' float error (relative to each, and to their arguments').
  cross_entropy_backward_input(space, logits, targets, scale, dl);
  cross_entropy_backward_input(space, logits64, targets, double(scale), dl64);
  const auto ref = host_values(dl64);
  const auto ids = Kokkos::create_mirror_view_and_copy(HostSpace(), targets);
  std::vector<double> m(ref.size());
  for (std::int64_t i = 0; i < n; ++i) {
    double largest = 0;
    for (std::int64_t v = 0; v < vocab; ++v) largest = std::max(largest, std::abs(lv[i * vocab + v]));
    for (std::int64_t v = 0; v < vocab; ++v) {
      const double onehot = v == ids(i) ? 1.0 : 0.0;
      m[i * vocab + v] = scale * (ref[i * vocab + v] / scale + 2 * onehot) * (1 + largest);
    }
  }
  expect_within("cross_entropy_backward_input", host_values(dl), ref, rounded_once(ref), m);
}

// The attention core rounds the probabilities (the operand of P V and P^T dO), dL/d(q k^T) (the dq and dk products'
// operand) and its outputs; scores, dL/dprobs and every sum stay in float. Besides each output's own
// rounding, the bounds carry what the rounded probabilities and dL/d(q k^T) propagate:
//   out_i = sum_j P_ij v_j            + u sum_j P_ij |v_j|
//   dv_j  = sum_i P_ij dO_i           + u sum_i P_ij |dO_i|
//   dS_ij = s P_ij (dP_ij - sum_l dP_il P_il), off by E_ij = 2u |dS_ij| (its rounding, and P_ij's) +
//           u s P_ij sum_l |dP_il| P_il (the rounded P in the sum)
//   dq_i  = sum_j dS_ij k_j           + sum_j E_ij |k_j|,    dk_j = sum_i dS_ij q_i  + sum_i E_ij |q_i|
TEST(MixedPrecision, AttentionWithinItsRoundingBound) {
  const AttentionShape shape{2, 140, 3, 8};  // two blocks of query rows
  const std::int64_t rows = shape.rows(), c = shape.channels(), seq = shape.seq, hd = shape.head_dim;
  ExecSpace space;
  View2<bf16> qkv("qkv", rows, 3 * c), dout("dout", rows, c), out("out", rows, c), dqkv("dqkv", rows, 3 * c);
  View2<double> qkv64("qkv", rows, 3 * c), dout64("dout", rows, c), out64("out", rows, c), dqkv64("dqkv", rows, 3 * c);
  const auto qv = fill(qkv, 9, -2.0, 2.0), gv = fill(dout, 10);
  assign(qkv64, qv);
  assign(dout64, gv);
  const auto stash = allocate_stash<float, bf16>(shape);
  const auto stash64 = allocate_stash<double>(shape);
  const auto work = allocate_work<float, bf16>(shape);
  const auto work64 = allocate_work<double>(shape);
  attention_forward(space, shape, qkv, stash, work, out);
  attention_forward(space, shape, qkv64, stash64, work64, out64);
  attention_backward_input(space, shape, stash, work, dout, dqkv);
  attention_backward_input(space, shape, stash64, work64, dout64, dqkv64);

  const Rows QKV{qv, 3 * c}, DO{gv, c};
  const double scale = 1.0 / std::sqrt(double(hd));
  auto at = [&](int b, int h, std::int64_t i, std::int64_t j) {
    return std::size_t(((std::int64_t(b) * shape.heads + h) * seq + i) * seq + j);
  };
  // The probabilities in double, from the definition (the layer keeps only their statistics).
  std::vector<double> P(std::size_t(shape.heads_in_batch() * seq * seq), 0.0);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (std::int64_t i = 0; i < seq; ++i) {
        const std::int64_t r0 = std::int64_t(b) * seq, q0 = h * hd, k0 = c + q0;
        double m = -1e300, norm = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double z = 0;
          for (std::int64_t d = 0; d < hd; ++d) z += QKV(r0 + i, q0 + d) * QKV(r0 + j, k0 + d);
          P[at(b, h, i, j)] = z * scale;
          m = std::max(m, z * scale);
        }
        for (std::int64_t j = 0; j <= i; ++j) norm += P[at(b, h, i, j)] = std::exp(P[at(b, h, i, j)] - m);
        for (std::int64_t j = 0; j <= i; ++j) P[at(b, h, i, j)] /= norm;
      }
  std::vector<double> r_out(rows * c, 0.0), m_out(rows * c, 0.0);
  std::vector<double> r_dqkv(rows * 3 * c, 0.0), m_dqkv(rows * 3 * c, 0.0);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h) {
      const std::int64_t r0 = std::int64_t(b) * seq, q0 = h * hd, k0 = c + q0, v0 = 2 * c + q0;
      // dP, dS and their bound E, in double from the float64 run's probabilities.
      std::vector<double> dP(seq * seq, 0.0), mdP(seq * seq, 0.0), dS(seq * seq, 0.0), E(seq * seq, 0.0);
      for (std::int64_t i = 0; i < seq; ++i) {
        double dot = 0, dot_abs = 0, dot_mag = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          for (std::int64_t d = 0; d < hd; ++d) {
            dP[i * seq + j] += DO(r0 + i, q0 + d) * QKV(r0 + j, v0 + d);
            mdP[i * seq + j] += std::abs(DO(r0 + i, q0 + d) * QKV(r0 + j, v0 + d));
          }
          const double p = P[at(b, h, i, j)];
          dot += dP[i * seq + j] * p;
          dot_abs += std::abs(dP[i * seq + j]) * p;
          dot_mag += (mdP[i * seq + j] + std::abs(dP[i * seq + j])) * p;
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const double p = P[at(b, h, i, j)];
          dS[i * seq + j] = scale * p * (dP[i * seq + j] - dot);
          E[i * seq + j] = 2 * u * std::abs(dS[i * seq + j]) + u * scale * p * dot_abs +
                           f * scale * p * (mdP[i * seq + j] + std::abs(dP[i * seq + j]) + dot_mag);
        }
      }
      for (std::int64_t i = 0; i < seq; ++i)
        for (std::int64_t d = 0; d < hd; ++d) {
          double pv = 0, pdo = 0, dsk = 0, ek = 0, dsq = 0, eq = 0;
          for (std::int64_t j = 0; j <= i; ++j) {  // query row i: out and dq
            const double p = P[at(b, h, i, j)];
            pv += p * std::abs(QKV(r0 + j, v0 + d));
            dsk += std::abs(dS[i * seq + j] * QKV(r0 + j, k0 + d));
            ek += E[i * seq + j] * std::abs(QKV(r0 + j, k0 + d));
          }
          for (std::int64_t l = i; l < seq; ++l) {  // key row i: dv and dk
            const double p = P[at(b, h, l, i)];
            pdo += p * std::abs(DO(r0 + l, q0 + d));
            dsq += std::abs(dS[l * seq + i] * QKV(r0 + l, q0 + d));
            eq += E[l * seq + i] * std::abs(QKV(r0 + l, q0 + d));
          }
          r_out[(r0 + i) * c + q0 + d] = u * pv;
          m_out[(r0 + i) * c + q0 + d] = pv;
          r_dqkv[(r0 + i) * 3 * c + q0 + d] = ek;
          m_dqkv[(r0 + i) * 3 * c + q0 + d] = dsk;
          r_dqkv[(r0 + i) * 3 * c + k0 + d] = eq;
          m_dqkv[(r0 + i) * 3 * c + k0 + d] = dsq;
          r_dqkv[(r0 + i) * 3 * c + v0 + d] = u * pdo;
          m_dqkv[(r0 + i) * 3 * c + v0 + d] = pdo;
        }
    }
  const auto out_ref = host_values(out64), dqkv_ref = host_values(dqkv64);
  auto plus_own_rounding = [](std::vector<double> r, const std::vector<double>& x) {
    for (std::size_t i = 0; i < r.size(); ++i) r[i] += u * std::abs(x[i]);
    return r;
  };
  expect_within("attention forward", host_values(out), out_ref, plus_own_rounding(r_out, out_ref), m_out);
  expect_within("attention backward_input", host_values(dqkv), dqkv_ref, plus_own_rounding(r_dqkv, dqkv_ref),
                m_dqkv);
}

// The head: LayerNorm (h rounded), logits = h W^T in float, the loss in float, dlogits rounded, dh = dlogits W
// rounded, LayerNorm's backward (dx rounded), dW and LayerNorm's gradients in float. First-order bounds,
// carried forward and back (D: the bound on an element's error):
//   D h_ic      = u |h_ic| + f m                       (LayerNorm forward)
//   D logit_iv  = sum_c D h_ic |W_vc|                  (+ f sum |h W|)
//   D loss_i    = sum_v |p_iv - [v = t_i]| D logit_iv
//   D dl_iv     = u |dl_iv| + s p_iv (D logit_iv + sum_w p_iw D logit_iw)
//   D dh_ic     = u |dh_ic| + sum_v D dl_iv |W_vc|
//   D dx_ic     = u |dx_ic| + r_i (|g_c| D dh_ic + mean_c' |g_c'| D dh_ic' + |x̂_ic| mean_c' |g_c' x̂_ic'| D dh_ic')
//   D dW_vc     = sum_i (D dl_iv |h_ic| + |dl_iv| D h_ic)
//   D dgamma_c  = sum_i D dh_ic |x̂_ic|,   D dbeta_c = sum_i D dh_ic
TEST(MixedPrecision, HeadWithinItsRoundingBound) {
  const std::int64_t n = 23, c = 70, vocab = 300;
  ExecSpace space;
  const float eps = 1e-5f;
  Head<float, bf16> lo{LayerNorm<float, bf16>{View1<float>("gamma", c), View1<float>("beta", c),
                                              View1<float>("dgamma", c), View1<float>("dbeta", c), eps},
                       Linear<float, bf16>{View2<bf16>("w", vocab, c), View1<float>(), View2<float>("dw", vocab, c),
                                           View1<float>(),
                                           allocate_products<float>(head_products_size<float, bf16>(n, c, vocab))}};
  Head<double> hi{LayerNorm<double>{View1<double>("gamma", c), View1<double>("beta", c), View1<double>("dgamma", c),
                                    View1<double>("dbeta", c), double(eps)},
                  Linear<double>{View2<double>("w", vocab, c), View1<double>(), View2<double>("dw", vocab, c),
                                 View1<double>()}};
  const auto gamma = fill(lo.ln.gamma, 1, 0.5, 1.5), beta = fill(lo.ln.beta, 2), w = fill(lo.lm.weight, 3);
  assign(hi.ln.gamma, gamma);
  assign(hi.ln.beta, beta);
  assign(hi.lm.weight, w);
  View2<bf16> x("x", n, c), dx("dx", n, c);
  View2<double> x64("x", n, c), dx64("dx", n, c);
  const auto xv = fill(x, 4, -2.0, 2.0);
  assign(x64, xv);
  const View1<const Token> targets = token_ids(n, int(vocab), 53);
  const auto stash = allocate_stash(lo, n);
  const auto grads = allocate_grads(lo, n);
  const auto stash64 = allocate_stash(hi, n);
  const auto grads64 = allocate_grads(hi, n);
  forward(space, lo, x, targets, stash);
  forward(space, hi, x64, targets, stash64);
  const auto logits = host_values(stash64.logits), losses = host_values(stash64.losses);
  const float scale = 1.0f / float(n);
  backward_input(space, lo, x, targets, scale, stash, grads, dx);
  backward_input(space, hi, x64, targets, double(scale), stash64, grads64, dx64);
  backward_weight(space, lo, x, stash, grads);
  backward_weight(space, hi, x64, stash64, grads64);

  const auto h = host_values(stash64.h), mu = host_values(stash64.mean), r = host_values(stash64.rstd);
  const auto dl = host_values(stash64.logits), dh = host_values(grads64.dh);  // dL/dlogits overwrote the logits
  const auto ids = Kokkos::create_mirror_view_and_copy(HostSpace(), targets);
  const Rows X{xv, c}, H{h, c}, W{w, c}, DL{dl, vocab}, DH{dh, c}, LOGIT{logits, vocab};
  auto xhat = [&](std::int64_t i, std::int64_t j) { return (X(i, j) - mu[i]) * r[i]; };
  std::vector<double> Dh(n * c), m_h(n * c), Dlogit(n * vocab), Dloss(n, 0.0), m_loss(n);
  std::vector<double> Ddl(n * vocab), m_dl(n * vocab);
  std::vector<double> Ddh(n * c), m_dh(n * c), Ddx(n * c), m_dx(n * c);
  std::vector<double> DdW(vocab * c, 0.0), m_dW(vocab * c, 0.0), Ddg(c, 0.0), m_dg(c, 0.0), Ddb(c, 0.0), m_db(c, 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < c; ++j) {
      m_h[i * c + j] = (std::abs(X(i, j)) + std::abs(mu[i])) * r[i] * std::abs(gamma[j]) + std::abs(beta[j]);
      Dh[i * c + j] = u * std::abs(H(i, j)) + f * m_h[i * c + j];
    }
    double largest = 0;
    for (std::int64_t v = 0; v < vocab; ++v) {
      double d = 0, m = 0;
      for (std::int64_t j = 0; j < c; ++j) {
        d += Dh[i * c + j] * std::abs(W(v, j));
        m += std::abs(H(i, j) * W(v, j));
      }
      Dlogit[i * vocab + v] = d + f * m;
      largest = std::max(largest, std::abs(LOGIT(i, v)));
    }
    double spread = 0;  // sum_w p_iw D logit_iw
    for (std::int64_t v = 0; v < vocab; ++v) {
      const double onehot = v == ids(i) ? 1.0 : 0.0, p = DL(i, v) / scale + onehot;
      Dloss[i] += std::abs(p - onehot) * Dlogit[i * vocab + v];
      spread += p * Dlogit[i * vocab + v];
    }
    m_loss[i] = 2 * largest + std::abs(losses[i]);
    for (std::int64_t v = 0; v < vocab; ++v) {
      const double onehot = v == ids(i) ? 1.0 : 0.0, p = DL(i, v) / scale + onehot;
      Ddl[i * vocab + v] = u * std::abs(DL(i, v)) + scale * p * (Dlogit[i * vocab + v] + spread);
      m_dl[i * vocab + v] = scale * (p + onehot) * (1 + largest);
    }
    for (std::int64_t j = 0; j < c; ++j) {
      double d = 0, m = 0;
      for (std::int64_t v = 0; v < vocab; ++v) {
        d += Ddl[i * vocab + v] * std::abs(W(v, j));
        m += std::abs(DL(i, v) * W(v, j));
      }
      Ddh[i * c + j] = u * std::abs(DH(i, j)) + d + f * m;
      m_dh[i * c + j] = m;
    }
    double mean_gD = 0, mean_gxD = 0, mean_g = 0, mean_gx = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      mean_gD += std::abs(gamma[j]) * Ddh[i * c + j] / double(c);
      mean_gxD += std::abs(gamma[j] * xhat(i, j)) * Ddh[i * c + j] / double(c);
      mean_g += std::abs(gamma[j] * DH(i, j)) / double(c);
      mean_gx += std::abs(gamma[j] * DH(i, j) * xhat(i, j)) / double(c);
    }
    for (std::int64_t j = 0; j < c; ++j) {
      Ddx[i * c + j] = r[i] * (std::abs(gamma[j]) * Ddh[i * c + j] + mean_gD + std::abs(xhat(i, j)) * mean_gxD);
      m_dx[i * c + j] = r[i] * (std::abs(gamma[j] * DH(i, j)) + mean_g + (std::abs(xhat(i, j)) + 1) * mean_gx);
      Ddg[j] += Ddh[i * c + j] * std::abs(xhat(i, j));
      m_dg[j] += std::abs(DH(i, j)) * (std::abs(X(i, j)) * r[i] + std::abs(xhat(i, j)));
      Ddb[j] += Ddh[i * c + j];
      m_db[j] += std::abs(DH(i, j));
    }
    for (std::int64_t v = 0; v < vocab; ++v)
      for (std::int64_t j = 0; j < c; ++j) {
        DdW[v * c + j] += Ddl[i * vocab + v] * std::abs(H(i, j)) + std::abs(DL(i, v)) * Dh[i * c + j];
        m_dW[v * c + j] += std::abs(DL(i, v) * H(i, j));
      }
  }
  const auto dx_ref = host_values(dx64);
  for (std::size_t i = 0; i < Ddx.size(); ++i) Ddx[i] += u * std::abs(dx_ref[i]);
  expect_within("Head h", host_values(stash.h), h, rounded_once(h), m_h);
  expect_within("Head logits", host_values(stash.logits), logits, Dlogit, zeros_like(logits));
  expect_within("Head losses", host_values(stash.losses), losses, Dloss, m_loss);
  expect_within("Head dlogits", host_values(grads.dlogits), dl, Ddl, m_dl);
  expect_within("Head dh", host_values(grads.dh), dh, Ddh, zeros_like(dh));
  expect_within("Head backward_input dx", host_values(dx), dx_ref, Ddx, m_dx);
  expect_within("Head lm dweight", host_values(lo.lm.dweight), host_values(hi.lm.dweight), DdW, m_dW);
  expect_within("Head ln dgamma", host_values(lo.ln.dgamma), host_values(hi.ln.dgamma), Ddg, m_dg);
  expect_within("Head ln dbeta", host_values(lo.ln.dbeta), host_values(hi.ln.dbeta), Ddb, m_db);
}

}  // namespace
}  // namespace kpipe::nn
