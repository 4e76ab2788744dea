// Every kernel with a host and a device path (core/kernel_path.hpp) gives the same answer on both, in float
// (and with bf16 storage, at the end), on the same inputs, in every build: CI fails when a device path drifts
// from its host path.
//
// Two kinds of agreement:
//  - bit for bit where the paths only split the work differently and add in the same order (elementwise
//    kernels, the fused bias and residual writes, column sums of bias, LayerNorm and embedding gradients,
//    the optimizer update);
//  - within a relative 1e-5 (about 170 float ulps) plus an absolute 1e-6 where the order of a reduction or
//    the exponential differs (row reductions: 16 vector lanes on the host, a team reduction on the device;
//    math::fast_exp, within 1 ulp, on the host, Kokkos::exp on the device; attention's products through BLAS
//    on the host, the batched kernels on the device). With O(1) inputs and sums over at most a few hundred
//    terms, rounding differences stay near 1e-7 relative; an indexing, masking or race bug shows as O(1e-2)
//    or more. Sizes are chosen off every block size (64 columns, 16 lanes, the 64-row causal blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kpipe/nn/attention.hpp"
#include "kpipe/nn/cross_entropy.hpp"
#include "kpipe/nn/embedding.hpp"
#include "kpipe/nn/gelu.hpp"
#include "kpipe/nn/layernorm.hpp"
#include "kpipe/nn/linear.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "support/gradcheck.hpp"
#include "support/precision.hpp"

namespace kpipe::nn {
namespace {

constexpr KernelPath host = KernelPath::host, device = KernelPath::device;
constexpr double rtol = 1e-5, atol = 1e-6;

template <class V> std::vector<double> values(const V& v) { return test::host_values(v); }

template <class V> V copy_of(const V& v, const char* label) {
  V c(std::string(label), v.layout());
  Kokkos::deep_copy(c, v);
  return c;
}

// The worst |a - b| / (atol + rtol max(|a|, |b|)) over the elements must be at most 1.
template <class V> void expect_close(const std::string& what, const V& a, const V& b) {
  const auto x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(x[i]) && std::isfinite(y[i])) << what << " element " << i;
    const double ratio = std::abs(x[i] - y[i]) / (atol + rtol * std::max(std::abs(x[i]), std::abs(y[i])));
    if (ratio > worst) worst = ratio, at = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << at << " host " << x[at] << " device " << y[at];
}

template <class V> void expect_same_bits(const std::string& what, const V& a, const V& b) {
  const auto x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << " element " << i;
}

View1<Token> tokens_for(std::int64_t n, int vocab) {
  View1<Token> t("tokens", n);
  auto h = Kokkos::create_mirror_view(t);
  for (std::int64_t i = 0; i < n; ++i) h(i) = Token((i * 37 + 11) % vocab);
  Kokkos::deep_copy(t, h);
  return t;
}

TEST(KernelPaths, LayerNormForwardAndBackwardAgree) {
  const int n = 37, c = 70;
  ExecSpace space;
  LayerNorm<float> ln{View1<float>("gamma", c), View1<float>("beta", c), View1<float>("dgamma", c),
                      View1<float>("dbeta", c)};
  View2<float> x("x", n, c), dy("dy", n, c);
  test::fill_uniform(ln.gamma, 1, 0.5, 1.5);
  test::fill_uniform(ln.beta, 2);
  test::fill_uniform(x, 3, -2.0, 3.0);
  test::fill_uniform(dy, 4);
  View2<float> y_h("y", n, c), y_d("y", n, c);
  View1<float> mean_h("mean", n), mean_d("mean", n), rstd_h("rstd", n), rstd_d("rstd", n);
  forward<float, float, host>(space, ln, x, y_h, mean_h, rstd_h);
  forward<float, float, device>(space, ln, x, y_d, mean_d, rstd_d);
  expect_close("LayerNorm forward y", y_h, y_d);
  expect_close("LayerNorm forward mean", mean_h, mean_d);
  expect_close("LayerNorm forward rstd", rstd_h, rstd_d);

  View2<float> dx_h("dx", n, c), residual("residual", n, c), dx_apart_h("dx", n, c), dx_apart_d("dx", n, c);
  test::fill_uniform(dx_h, 5);  // add to a residual gradient in place
  auto dx_d = copy_of(dx_h, "dx");
  backward_input<float, float, host>(space, ln, x, mean_h, rstd_h, dy, dx_h, dx_h);
  backward_input<float, float, device>(space, ln, x, mean_h, rstd_h, dy, dx_d, dx_d);
  expect_close("LayerNorm backward_input", dx_h, dx_d);
  test::fill_uniform(residual, 5);  // and apart from dx
  backward_input<float, float, host>(space, ln, x, mean_h, rstd_h, dy, dx_apart_h, residual);
  backward_input<float, float, device>(space, ln, x, mean_h, rstd_h, dy, dx_apart_d, residual);
  expect_close("LayerNorm backward_input, the residual apart", dx_apart_h, dx_apart_d);

  auto ln_d = ln;
  ln_d.dgamma = View1<float>("dgamma", c);
  ln_d.dbeta = View1<float>("dbeta", c);
  backward_weight<float, float, host>(space, ln, x, mean_h, rstd_h, dy);
  backward_weight<float, float, device>(space, ln_d, x, mean_h, rstd_h, dy);
  expect_same_bits("LayerNorm dgamma", ln.dgamma, ln_d.dgamma);
  expect_same_bits("LayerNorm dbeta", ln.dbeta, ln_d.dbeta);
}

TEST(KernelPaths, CrossEntropyAgrees) {
  const int n = 29, vocab = 300;
  ExecSpace space;
  View2<float> logits("logits", n, vocab);
  test::fill_uniform(logits, 7, -4.0, 4.0);
  const View1<const Token> targets = tokens_for(n, vocab);
  View1<float> loss_h("loss", n), loss_d("loss", n);
  cross_entropy_forward<float, host>(space, logits, targets, loss_h);
  cross_entropy_forward<float, device>(space, logits, targets, loss_d);
  expect_close("cross-entropy forward", loss_h, loss_d);
  View2<float> grad_h("grad", n, vocab), grad_d("grad", n, vocab);
  cross_entropy_backward_input<float, float, host>(space, logits, targets, 0.25f, grad_h);
  cross_entropy_backward_input<float, float, device>(space, logits, targets, 0.25f, grad_d);
  expect_close("cross-entropy backward_input", grad_h, grad_d);
  // In place, as the head runs it.
  auto inplace_d = copy_of(logits, "inplace");
  cross_entropy_backward_input<float, float, device>(space, inplace_d, targets, 0.25f, inplace_d);
  expect_same_bits("cross-entropy backward_input in place (device)", grad_d, inplace_d);
}

TEST(KernelPaths, AttentionAgrees) {
  // seq 140: two blocks of query rows, rows not a multiple of 16 lanes.
  const AttentionShape shape{2, 140, 3, 8};
  ExecSpace space;
  View2<float> qkv("qkv", shape.rows(), 3 * shape.channels()), dout("dout", shape.rows(), shape.channels());
  test::fill_uniform(qkv, 9, -2.0, 2.0);
  test::fill_uniform(dout, 10);
  auto stash_h = allocate_stash<float>(shape), stash_d = allocate_stash<float>(shape);
  auto work_h = allocate_work<float>(shape), work_d = allocate_work<float>(shape);
  View2<float> out_h("out", shape.rows(), shape.channels()), out_d("out", shape.rows(), shape.channels());
  attention_forward<float, float, host>(space, shape, qkv, stash_h, work_h, out_h);
  attention_forward<float, float, device>(space, shape, qkv, stash_d, work_d, out_d);
  expect_close("attention softmax statistics", stash_h.softmax, stash_d.softmax);
  expect_close("attention forward", out_h, out_d);
  View2<float> dqkv_h("dqkv", shape.rows(), 3 * shape.channels()), dqkv_d("dqkv", shape.rows(), 3 * shape.channels());
  attention_backward_input<float, float, host>(space, shape, stash_h, work_h, dout, dqkv_h);
  attention_backward_input<float, float, device>(space, shape, stash_d, work_d, dout, dqkv_d);
  expect_close("attention backward_input", dqkv_h, dqkv_d);
}

TEST(KernelPaths, GeluAgreesBitForBit) {
  const int n = 13, f = 333;  // not a multiple of the host path's 2048-element blocks
  ExecSpace space;
  View2<float> x("x", n, f), dy("dy", n, f), bias_f("f", n, f);
  View1<float> bias("bias", f);
  test::fill_uniform(x, 11, -6.0, 6.0);
  test::fill_uniform(dy, 12);
  test::fill_uniform(bias, 13);
  View2<float> y_h("y", n, f), y_d("y", n, f);
  gelu_forward<float, host>(space, x, y_h);
  gelu_forward<float, device>(space, x, y_d);
  expect_same_bits("gelu_forward", y_h, y_d);
  View2<float> dx_h("dx", n, f), dx_d("dx", n, f);
  gelu_backward_input<float, host>(space, x, dy, dx_h);
  gelu_backward_input<float, device>(space, x, dy, dx_d);
  expect_same_bits("gelu_backward_input", dx_h, dx_d);
  auto f_h = copy_of(x, "f"), f_d = copy_of(x, "f");
  View2<float> g_h("g", n, f), g_d("g", n, f);
  bias_gelu_forward<float, host>(space, bias, f_h, g_h);
  bias_gelu_forward<float, device>(space, bias, f_d, g_d);
  expect_same_bits("bias_gelu_forward f", f_h, f_d);
  expect_same_bits("bias_gelu_forward g", g_h, g_d);
}

TEST(KernelPaths, LinearAgreesBitForBit) {
  const int n = 21, in = 19, out = 70;
  ExecSpace space;
  Linear<float> layer{View2<float>("w", out, in), View1<float>("b", out), View2<float>("dw", out, in),
                      View1<float>("db", out)};
  test::fill_uniform(layer.weight, 14);
  test::fill_uniform(layer.bias, 15);
  View2<float> x("x", n, in), residual("residual", n, out), dy("dy", n, out);
  test::fill_uniform(x, 16);
  test::fill_uniform(residual, 17);
  test::fill_uniform(dy, 18);
  View2<float> y_h("y", n, out), y_d("y", n, out);
  forward<float, float, host>(space, layer, x, y_h);
  forward<float, float, device>(space, layer, x, y_d);
  expect_same_bits("Linear forward", y_h, y_d);
  forward_residual<float, float, host>(space, layer, x, residual, y_h);
  forward_residual<float, float, device>(space, layer, x, residual, y_d);
  expect_same_bits("Linear forward_residual", y_h, y_d);
  auto layer_d = layer;
  layer_d.dweight = View2<float>("dw", out, in);
  layer_d.dbias = View1<float>("db", out);
  backward_weight<float, float, host>(space, layer, x, dy);
  backward_weight<float, float, device>(space, layer_d, x, dy);
  expect_same_bits("Linear dweight", layer.dweight, layer_d.dweight);
  expect_same_bits("Linear dbias", layer.dbias, layer_d.dbias);
}

TEST(KernelPaths, EmbeddingGradientAgreesBitForBit) {
  const int vocab = 50, positions = 12, seq = 9, c = 70, sequences = 4;
  ExecSpace space;
  auto make = [&] {
    return Embedding<float>{View2<float>("token", vocab, c), View2<float>("position", positions, c),
                            View2<float>("dtoken", vocab, c), View2<float>("dposition", positions, c)};
  };
  auto emb_h = make(), emb_d = make();
  const View1<const Token> tokens = tokens_for(std::int64_t(sequences) * seq, 7);  // ids repeat
  View2<float> dout("dout", std::int64_t(sequences) * seq, c);
  test::fill_uniform(dout, 19);
  const auto order = allocate_scratch<float>(tokens.extent(0), c);
  backward_weight<float, float, host>(space, emb_h, tokens, seq, dout, order);
  backward_weight<float, float, device>(space, emb_d, tokens, seq, dout, order);
  expect_same_bits("Embedding dtoken", emb_h.dtoken, emb_d.dtoken);
  expect_same_bits("Embedding dposition", emb_h.dposition, emb_d.dposition);
}

TEST(KernelPaths, OptimizerAgrees) {
  const std::int64_t n = 5000;  // two whole host blocks and a partial one
  ExecSpace space;
  View1<float> params("p", n), grads("g", n), m("m", n), v("v", n);
  View1<std::uint8_t> mask("mask", n);
  test::fill_uniform(params, 20);
  test::fill_uniform(grads, 21);
  test::fill_uniform(m, 22, -0.1, 0.1);
  test::fill_uniform(v, 23, 0.0, 0.1);
  Kokkos::deep_copy(mask, std::uint8_t(1));
  const double squares_h = sum_squares<float, host>(space, grads), squares_d = sum_squares<float, device>(space, grads);
  EXPECT_NEAR(squares_h, squares_d, 1e-12 * squares_h) << "sum_squares (in double)";
  auto p_d = copy_of(params, "p"), m_d = copy_of(m, "m"), v_d = copy_of(v, "v");
  OptimizerConfig cfg;
  adamw_update<float, host>(space, cfg, 1e-3, 3, 0.5, params, grads, m, v, mask);
  adamw_update<float, device>(space, cfg, 1e-3, 3, 0.5, p_d, grads, m_d, v_d, mask);
  expect_same_bits("adamw params", params, p_d);
  expect_same_bits("adamw m", m, m_d);
  expect_same_bits("adamw v", v, v_d);
  // With a look-ahead (an asynchronous schedule's stale update) too.
  adamw_update<float, host>(space, cfg, 1e-3, 4, 0.5, params, grads, m, v, mask, 2.0);
  adamw_update<float, device>(space, cfg, 1e-3, 4, 0.5, p_d, grads, m_d, v_d, mask, 2.0);
  expect_same_bits("adamw look-ahead params", params, p_d);
  // The one-pass update into the next version's buffer, with and without look-ahead, the gradients zeroed
  // (each path its own copy).
  for (const double lookahead : {0.0, 2.0}) {
    View1<float> next_h("next_h", n), next_d("next_d", n);
    auto g_h = copy_of(grads, "g_h"), g_d = copy_of(grads, "g_d");
    adamw_update_into<float, host>(space, cfg, 1e-3, 5, 0.5, params, next_h, g_h, m, v, mask, lookahead);
    adamw_update_into<float, device>(space, cfg, 1e-3, 5, 0.5, p_d, next_d, g_d, m_d, v_d, mask, lookahead);
    expect_same_bits("adamw_update_into params", next_h, next_d);
    expect_same_bits("adamw_update_into m", m, m_d);
    expect_same_bits("adamw_update_into v", v, v_d);
    expect_same_bits("adamw_update_into gradients", g_h, g_d);
  }
}

// The same kernels with bf16 storage (float arithmetic). Where the paths add in the same order, bit for
// bit again. Elsewhere each path's float result is within the float comparison above, and is then rounded
// to bf16: two roundings of values that close are at most u = 2^-8 of each apart, so rtol 2u + 1e-5. Attention
// also rounds intermediates (the probabilities, dL/d(q k^T)): where the paths' float values straddle a rounding
// boundary, that element's u-sized difference propagates into the sums over it, so its outputs get an
// absolute 2u of the tensor's largest magnitude as well.
constexpr double bf16_rtol = 2 * 0x1p-8 + 1e-5;

template <class V> void expect_close_bf16(const std::string& what, const V& a, const V& b, double atol_of_max = 0) {
  const auto x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  double largest = 0;
  for (double v : x) largest = std::max(largest, std::abs(v));
  const double absolute = atol + atol_of_max * largest;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(x[i]) && std::isfinite(y[i])) << what << " element " << i;
    const double ratio = std::abs(x[i] - y[i]) / (absolute + bf16_rtol * std::max(std::abs(x[i]), std::abs(y[i])));
    if (ratio > worst) worst = ratio, at = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << at << " host " << x[at] << " device " << y[at];
}

// The residual's add and ln2 in one kernel (the mixed-precision block's): on each path, its sum has the bits of
// Linear's epilogue (product + bias + residual, rounded once) and its y, mean and rstd those of forward on that
// sum; the two paths agree as forward's do.
template <class A> void expect_add_residual_forward_agrees(const char* what) {
  SCOPED_TRACE(what);
  const int n = 37, c = 70;
  ExecSpace space;
  LayerNorm<float, A> ln{View1<float>("gamma", c), View1<float>("beta", c), View1<float>("dgamma", c),
                         View1<float>("dbeta", c)};
  View2<float> product("product", n, c);
  View1<float> bias("bias", c);
  View2<A> residual("residual", n, c);
  test::fill_uniform(ln.gamma, 1, 0.5, 1.5);
  test::fill_uniform(ln.beta, 2);
  test::fill_uniform(product, 3, -2.0, 3.0);
  test::fill_uniform(bias, 4);
  const auto r = test::fill(residual, 5);
  const auto p = values(product), b = values(bias);
  std::vector<double> want(p.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < c; ++j)
      want[i * c + j] = double(widen<float>(narrow<A>(float(p[i * c + j]) + float(b[j]) + float(r[i * c + j]))));
  View2<A> sum_h("sum", n, c), sum_d("sum", n, c), y_h("y", n, c), y_d("y", n, c), y_ref("y", n, c);
  View1<float> mean_h("mean", n), mean_d("mean", n), rstd_h("rstd", n), rstd_d("rstd", n), mean_ref("mean", n),
      rstd_ref("rstd", n);
  add_residual_forward<float, A, host>(space, ln, product, bias, residual, sum_h, y_h, mean_h, rstd_h);
  add_residual_forward<float, A, device>(space, ln, product, bias, residual, sum_d, y_d, mean_d, rstd_d);
  EXPECT_EQ(values(sum_h), want);
  EXPECT_EQ(values(sum_d), want);
  forward<float, A, host>(space, ln, sum_h, y_ref, mean_ref, rstd_ref);
  expect_same_bits("host y against forward", y_h, y_ref);
  expect_same_bits("host mean against forward", mean_h, mean_ref);
  expect_same_bits("host rstd against forward", rstd_h, rstd_ref);
  forward<float, A, device>(space, ln, sum_d, y_ref, mean_ref, rstd_ref);
  expect_same_bits("device y against forward", y_d, y_ref);
  expect_same_bits("device mean against forward", mean_d, mean_ref);
  expect_same_bits("device rstd against forward", rstd_d, rstd_ref);
  if constexpr (std::is_same_v<A, bf16>) {
    expect_close_bf16("add_residual_forward y", y_h, y_d);
  } else {
    expect_close("add_residual_forward y", y_h, y_d);
  }
  expect_close("add_residual_forward mean", mean_h, mean_d);
}

TEST(KernelPaths, LayerNormAfterTheResidualsAddAgrees) {
  expect_add_residual_forward_agrees<float>("fp32");
  expect_add_residual_forward_agrees<bf16>("bf16");
}

TEST(KernelPaths, Bf16LayerNormAgrees) {
  const int n = 37, c = 70;
  ExecSpace space;
  LayerNorm<float, bf16> ln{View1<float>("gamma", c), View1<float>("beta", c), View1<float>("dgamma", c),
                            View1<float>("dbeta", c)};
  View2<bf16> x("x", n, c), dy("dy", n, c);
  test::fill_uniform(ln.gamma, 1, 0.5, 1.5);
  test::fill_uniform(ln.beta, 2);
  test::fill(x, 3, -2.0, 3.0);
  test::fill(dy, 4);
  View2<bf16> y_h("y", n, c), y_d("y", n, c);
  View1<float> mean_h("mean", n), mean_d("mean", n), rstd_h("rstd", n), rstd_d("rstd", n);
  forward<float, bf16, host>(space, ln, x, y_h, mean_h, rstd_h);
  forward<float, bf16, device>(space, ln, x, y_d, mean_d, rstd_d);
  expect_close_bf16("bf16 LayerNorm forward y", y_h, y_d);
  expect_close("bf16 LayerNorm forward mean", mean_h, mean_d);
  expect_close("bf16 LayerNorm forward rstd", rstd_h, rstd_d);
  View2<bf16> dx_h("dx", n, c), residual("residual", n, c), dx_apart_h("dx", n, c), dx_apart_d("dx", n, c);
  test::fill(dx_h, 5);
  auto dx_d = copy_of(dx_h, "dx");
  backward_input<float, bf16, host>(space, ln, x, mean_h, rstd_h, dy, dx_h, dx_h);
  backward_input<float, bf16, device>(space, ln, x, mean_h, rstd_h, dy, dx_d, dx_d);
  expect_close_bf16("bf16 LayerNorm backward_input", dx_h, dx_d);
  test::fill(residual, 5);
  backward_input<float, bf16, host>(space, ln, x, mean_h, rstd_h, dy, dx_apart_h, residual);
  backward_input<float, bf16, device>(space, ln, x, mean_h, rstd_h, dy, dx_apart_d, residual);
  expect_close_bf16("bf16 LayerNorm backward_input, the residual apart", dx_apart_h, dx_apart_d);
  auto ln_d = ln;
  ln_d.dgamma = View1<float>("dgamma", c);
  ln_d.dbeta = View1<float>("dbeta", c);
  backward_weight<float, bf16, host>(space, ln, x, mean_h, rstd_h, dy);
  backward_weight<float, bf16, device>(space, ln_d, x, mean_h, rstd_h, dy);
  // Float sums in the same order, but of products the compiler may contract into fused multiply-adds in one
  // instantiation and not the other (seen: 1 ulp): close, not the same bits.
  expect_close("bf16 LayerNorm dgamma", ln.dgamma, ln_d.dgamma);
  expect_same_bits("bf16 LayerNorm dbeta", ln.dbeta, ln_d.dbeta);
}

TEST(KernelPaths, Bf16CrossEntropyGradientAgrees) {
  const int n = 29, vocab = 300;
  ExecSpace space;
  View2<float> logits("logits", n, vocab);
  test::fill_uniform(logits, 7, -4.0, 4.0);
  const View1<const Token> targets = tokens_for(n, vocab);
  View2<bf16> grad_h("grad", n, vocab), grad_d("grad", n, vocab);
  cross_entropy_backward_input<float, bf16, host>(space, logits, targets, 0.25f, grad_h);
  cross_entropy_backward_input<float, bf16, device>(space, logits, targets, 0.25f, grad_d);
  expect_close_bf16("bf16 cross-entropy backward_input", grad_h, grad_d);
}

TEST(KernelPaths, Bf16AttentionAgrees) {
  const AttentionShape shape{2, 140, 3, 8};
  ExecSpace space;
  View2<bf16> qkv("qkv", shape.rows(), 3 * shape.channels()), dout("dout", shape.rows(), shape.channels());
  test::fill(qkv, 9, -2.0, 2.0);
  test::fill(dout, 10);
  auto stash_h = allocate_stash<float, bf16>(shape), stash_d = allocate_stash<float, bf16>(shape);
  auto work_h = allocate_work<float, bf16>(shape), work_d = allocate_work<float, bf16>(shape);
  View2<bf16> out_h("out", shape.rows(), shape.channels()), out_d("out", shape.rows(), shape.channels());
  attention_forward<float, bf16, host>(space, shape, qkv, stash_h, work_h, out_h);
  attention_forward<float, bf16, device>(space, shape, qkv, stash_d, work_d, out_d);
  expect_close("bf16 attention softmax statistics", stash_h.softmax, stash_d.softmax);
  expect_close_bf16("bf16 attention forward", out_h, out_d, 2 * 0x1p-8);
  View2<bf16> dqkv_h("dqkv", shape.rows(), 3 * shape.channels()), dqkv_d("dqkv", shape.rows(), 3 * shape.channels());
  attention_backward_input<float, bf16, host>(space, shape, stash_h, work_h, dout, dqkv_h);
  attention_backward_input<float, bf16, device>(space, shape, stash_d, work_d, dout, dqkv_d);
  expect_close_bf16("bf16 attention backward_input", dqkv_h, dqkv_d, 2 * 0x1p-8);
}

TEST(KernelPaths, Bf16ElementwiseKernelsAgreeBitForBit) {
  const int n = 13, f = 333;
  ExecSpace space;
  View2<bf16> x("x", n, f), dy("dy", n, f);
  test::fill(x, 11, -6.0, 6.0);
  test::fill(dy, 12);
  View2<bf16> y_h("y", n, f), y_d("y", n, f);
  gelu_forward<bf16, host>(space, x, y_h);
  gelu_forward<bf16, device>(space, x, y_d);
  expect_same_bits("bf16 gelu_forward", y_h, y_d);
  View2<bf16> dx_h("dx", n, f), dx_d("dx", n, f);
  gelu_backward_input<bf16, host>(space, x, dy, dx_h);
  gelu_backward_input<bf16, device>(space, x, dy, dx_d);
  expect_same_bits("bf16 gelu_backward_input", dx_h, dx_d);
  View2<float> product("product", n, f);
  View1<float> bias("bias", f);
  test::fill_uniform(product, 13, -4.0, 4.0);
  test::fill_uniform(bias, 14);
  View2<bf16> f_h("f", n, f), f_d("f", n, f), g_h("g", n, f), g_d("g", n, f);
  bias_gelu_forward<float, bf16, host>(space, bias, product, f_h, g_h);
  bias_gelu_forward<float, bf16, device>(space, bias, product, f_d, g_d);
  expect_same_bits("bf16 bias_gelu_forward f", f_h, f_d);
  expect_same_bits("bf16 bias_gelu_forward g", g_h, g_d);

  // Linear: the same products, then the epilogue and the bias' column sums in the same order.
  const int rows = 21, in = 19, out = 70;
  Linear<float, bf16> layer{View2<bf16>("w", out, in), View1<float>("b", out), View2<float>("dw", out, in),
                            View1<float>("db", out),
                            allocate_products<float>(linear_products_size<float, bf16>(rows, in, out))};
  test::fill(layer.weight, 15);
  test::fill_uniform(layer.bias, 16);
  View2<bf16> lx("x", rows, in), residual("residual", rows, out), ldy("dy", rows, out);
  test::fill(lx, 17);
  test::fill(residual, 18);
  test::fill(ldy, 19);
  View2<bf16> ly_h("y", rows, out), ly_d("y", rows, out);
  forward_residual<float, bf16, host>(space, layer, lx, residual, ly_h);
  forward_residual<float, bf16, device>(space, layer, lx, residual, ly_d);
  expect_same_bits("bf16 Linear forward_residual", ly_h, ly_d);
  auto layer_d = layer;
  layer_d.dweight = View2<float>("dw", out, in);
  layer_d.dbias = View1<float>("db", out);
  backward_weight<float, bf16, host>(space, layer, lx, ldy);
  backward_weight<float, bf16, device>(space, layer_d, lx, ldy);
  expect_same_bits("bf16 Linear dweight", layer.dweight, layer_d.dweight);
  expect_same_bits("bf16 Linear dbias", layer.dbias, layer_d.dbias);

  // Embedding gradients: float sums of bf16 rows, in the same order.
  const int vocab = 50, positions = 12, seq = 9, c = 70, sequences = 4;
  auto make = [&] {
    return Embedding<float, bf16>{View2<float>("token", vocab, c), View2<float>("position", positions, c),
                                  View2<float>("dtoken", vocab, c), View2<float>("dposition", positions, c)};
  };
  auto emb_h = make(), emb_d = make();
  const View1<const Token> tokens = tokens_for(std::int64_t(sequences) * seq, 7);
  View2<bf16> edout("dout", std::int64_t(sequences) * seq, c);
  test::fill(edout, 20);
  const auto order = allocate_scratch<float>(tokens.extent(0), c);
  backward_weight<float, bf16, host>(space, emb_h, tokens, seq, edout, order);
  backward_weight<float, bf16, device>(space, emb_d, tokens, seq, edout, order);
  expect_same_bits("bf16 Embedding dtoken", emb_h.dtoken, emb_d.dtoken);
  expect_same_bits("bf16 Embedding dposition", emb_h.dposition, emb_d.dposition);
}

}  // namespace
}  // namespace kpipe::nn
