#include "kpipe/model/desc.hpp"

#include <fmt/format.h>

#include <cmath>

namespace kpipe::model {

std::int64_t ParamSpec::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string LayerDesc::path() const { return fmt::format("layers/{:02d}", index); }

std::int64_t LayerDesc::num_params() const {
  std::int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

std::int64_t ModelDesc::num_params() const {
  std::int64_t n = 0;
  for (const auto& l : layers) n += l.num_params();
  return n;
}

double parameter_count(const ModelConfig& config) {
  ModelConfig one_block = config;
  one_block.n_layers = 1;
  const ModelDesc model = describe(one_block);
  return double(model.num_params()) + double(config.n_layers - 1) * double(model.layers.at(1).num_params());
}

double ModelDesc::forward_flops_per_sequence() const {
  double f = 0;
  for (const auto& l : layers) f += l.forward_flops;
  return f;
}

double ModelDesc::backward_flops_per_sequence() const {
  double f = 0;
  for (const auto& l : layers) f += l.backward_input_flops + l.backward_weight_flops;
  return f;
}

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::embedding: return "embedding";
    case LayerKind::block: return "block";
    case LayerKind::head: return "head";
  }
  return "?";
}

namespace {

ParamSpec weight(std::string name, std::int64_t rows, std::int64_t cols, double std) {
  return {std::move(name), {rows, cols}, Init::normal, std, true, true};
}
ParamSpec vec(std::string name, std::int64_t n, Init init) { return {std::move(name), {n}, init, 0.0, false}; }

}  // namespace

ModelDesc describe(const ModelConfig& c) {
  ModelDesc desc{c, {}};
  const std::int64_t C = c.d_model, T = c.seq_len, V = c.vocab, F = std::int64_t(c.mlp_ratio) * c.d_model;
  const double std = c.init_std, proj_std = c.init_std / std::sqrt(2.0 * c.n_layers);
  const double t = double(T);

  LayerDesc emb;
  emb.index = 0;
  emb.kind = LayerKind::embedding;
  emb.params = {weight("wte", V, C, std), weight("wpe", T, C, std)};
  emb.params[0].decay = emb.params[1].decay = false;  // embeddings are not decayed (as in GPT-2 practice)
  // Tables the embedding reads row by row in T, not matrix products' operands.
  emb.params[0].product_operand = emb.params[1].product_operand = false;
  emb.forward_flops = t * C;  // the position add
  emb.backward_weight_flops = 2 * t * C;
  emb.output_elems = T * C;
  desc.layers.push_back(emb);

  for (int b = 0; b < c.n_layers; ++b) {
    LayerDesc l;
    l.index = 1 + b;
    l.kind = LayerKind::block;
    l.params = {vec("ln1/gamma", C, Init::ones),          vec("ln1/beta", C, Init::zeros),
                weight("attn/qkv/weight", 3 * C, C, std), vec("attn/qkv/bias", 3 * C, Init::zeros),
                weight("attn/proj/weight", C, C, proj_std), vec("attn/proj/bias", C, Init::zeros),
                vec("ln2/gamma", C, Init::ones),          vec("ln2/beta", C, Init::zeros),
                weight("mlp/fc/weight", F, C, std),       vec("mlp/fc/bias", F, Init::zeros),
                weight("mlp/proj/weight", C, F, proj_std), vec("mlp/proj/bias", C, Init::zeros)};
    // Matrix products per sequence: qkv, proj, fc, mlp proj, and attention's two T x T x C products.
    const double linear = 2.0 * t * (3 * C * C + C * C + 2 * C * F);
    const double attention = 2.0 * 2.0 * t * t * C;
    const double elementwise = t * (10.0 * C + 8.0 * F) + 5.0 * t * t * c.n_heads;
    l.forward_flops = linear + attention + elementwise;
    // Model FLOPs: the backward's second q k^T (attention keeps no probabilities) is not counted, as PyTorch's
    // figures do not count recomputation.
    l.backward_input_flops = linear + 2 * attention + 2 * elementwise;
    l.backward_weight_flops = linear;
    // x, ln1 out, q, k, v, attn out, x2, ln2 out, fc out, gelu out; means and rstds; the softmax's statistics.
    l.stash_elems = T * (C * 8 + 2 * F) + 4 * T + 2 * std::int64_t(c.n_heads) * T;
    l.output_elems = T * C;
    desc.layers.push_back(l);
  }

  LayerDesc head;
  head.index = c.n_layers + 1;
  head.kind = LayerKind::head;
  head.params = {vec("ln_f/gamma", C, Init::ones), vec("ln_f/beta", C, Init::zeros),
                 weight("lm_head/weight", V, C, std)};
  head.forward_flops = 2.0 * t * C * V + t * (8.0 * C + 5.0 * V);
  head.backward_input_flops = 2.0 * t * C * V + t * (8.0 * C + 3.0 * V);
  head.backward_weight_flops = 2.0 * t * C * V;
  head.stash_elems = T * (2 * C + V) + 2 * T;
  head.output_elems = T;  // per-token losses
  desc.layers.push_back(head);
  return desc;
}

}  // namespace kpipe::model
