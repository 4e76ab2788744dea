#include "kpipe/io/hf_gpt2.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "kpipe/core/error.hpp"

namespace kpipe::io {

namespace {

using nlohmann::json;

// kpipe's parameter name within its layer -> GPT-2's within its module, and whether GPT-2's is the transpose.
struct Counterpart {
  const char* kpipe;
  const char* hf;
  bool transposed;
};
constexpr Counterpart embedding_names[] = {{"wte", "transformer.wte.weight", false},
                                           {"wpe", "transformer.wpe.weight", false}};
constexpr Counterpart block_names[] = {
    {"ln1/gamma", "ln_1.weight", false},          {"ln1/beta", "ln_1.bias", false},
    {"attn/qkv/weight", "attn.c_attn.weight", true}, {"attn/qkv/bias", "attn.c_attn.bias", false},
    {"attn/proj/weight", "attn.c_proj.weight", true}, {"attn/proj/bias", "attn.c_proj.bias", false},
    {"ln2/gamma", "ln_2.weight", false},          {"ln2/beta", "ln_2.bias", false},
    {"mlp/fc/weight", "mlp.c_fc.weight", true},    {"mlp/fc/bias", "mlp.c_fc.bias", false},
    {"mlp/proj/weight", "mlp.c_proj.weight", true}, {"mlp/proj/bias", "mlp.c_proj.bias", false}};
constexpr Counterpart head_names[] = {{"ln_f/gamma", "transformer.ln_f.weight", false},
                                      {"ln_f/beta", "transformer.ln_f.bias", false},
                                      {"lm_head/weight", "lm_head.weight", false}};

template <std::size_t n> const Counterpart& counterpart(const Counterpart (&names)[n], const std::string& param) {
  for (const Counterpart& c : names)
    if (param == c.kpipe) return c;
  throw std::logic_error("kpipe::io::gpt2_tensors: no GPT-2 counterpart of parameter " + param);
}

json optional_token(Token id) { return id >= 0 ? json(id) : json(nullptr); }

}  // namespace

std::vector<std::int64_t> Gpt2Tensor::hf_shape() const {
  return transposed ? std::vector<std::int64_t>(shape.rbegin(), shape.rend()) : shape;
}

std::vector<Gpt2Tensor> gpt2_tensors(const model::ModelDesc& desc) {
  std::vector<Gpt2Tensor> tensors;
  for (const auto& layer : desc.layers)
    for (const auto& param : layer.params) {
      Gpt2Tensor t;
      t.kpipe = layer.path() + "/" + param.name;
      t.shape = param.shape;
      const Counterpart* c = nullptr;
      switch (layer.kind) {
        case model::LayerKind::embedding: c = &counterpart(embedding_names, param.name); break;
        case model::LayerKind::block: c = &counterpart(block_names, param.name); break;
        case model::LayerKind::head: c = &counterpart(head_names, param.name); break;
      }
      t.hf = layer.kind == model::LayerKind::block ? fmt::format("transformer.h.{}.{}", layer.index - 1, c->hf) : c->hf;
      t.transposed = c->transposed;
      tensors.push_back(std::move(t));
    }
  return tensors;
}

std::vector<float> transposed(const std::vector<float>& values, std::int64_t rows, std::int64_t cols) {
  std::vector<float> out(values.size());
  // In tiles, so that both sides are read and written a cache line at a time.
  constexpr std::int64_t tile = 32;
  for (std::int64_t r0 = 0; r0 < rows; r0 += tile)
    for (std::int64_t c0 = 0; c0 < cols; c0 += tile)
      for (std::int64_t r = r0; r < std::min(rows, r0 + tile); ++r)
        for (std::int64_t c = c0; c < std::min(cols, c0 + tile); ++c)
          out[std::size_t(c * rows + r)] = values[std::size_t(r * cols + c)];
  return out;
}

std::string gpt2_config_json(const ModelConfig& m, Token end_of_text, const std::string& torch_dtype) {
  const json config = {{"architectures", {"GPT2LMHeadModel"}},
                       {"model_type", "gpt2"},
                       {"vocab_size", m.vocab},
                       {"n_positions", m.seq_len},
                       {"n_embd", m.d_model},
                       {"n_layer", m.n_layers},
                       {"n_head", m.n_heads},
                       {"n_inner", m.mlp_ratio * m.d_model},
                       {"activation_function", "gelu_new"},
                       {"layer_norm_epsilon", m.ln_eps},
                       {"initializer_range", m.init_std},
                       {"resid_pdrop", 0.0},
                       {"embd_pdrop", 0.0},
                       {"attn_pdrop", 0.0},
                       {"scale_attn_weights", true},
                       {"scale_attn_by_inverse_layer_idx", false},
                       {"reorder_and_upcast_attn", false},
                       {"tie_word_embeddings", false},
                       {"bos_token_id", optional_token(end_of_text)},
                       {"eos_token_id", optional_token(end_of_text)},
                       {"torch_dtype", torch_dtype},
                       {"use_cache", true}};
  return config.dump(1);
}

std::string generation_config_json(Token end_of_text) {
  return json{{"do_sample", true},
              {"temperature", 0.8},
              {"top_k", 40},
              {"max_new_tokens", 200},
              {"bos_token_id", optional_token(end_of_text)},
              {"eos_token_id", optional_token(end_of_text)}}
      .dump(1);
}

Gpt2Model gpt2_model(const std::string& text, const std::string& label) {
  const json c = json::parse(text, nullptr, false);
  require(!c.is_discarded() && c.is_object(), "{}: not a JSON object", label);
  const auto refuse = [&](const char* key, const std::string& why) {
    throw InputError(fmt::format("{}: {} = {}: {}", label, key, c.contains(key) ? c[key].dump() : "(absent)", why));
  };
  if (!c.contains("model_type") || c["model_type"] != "gpt2")
    refuse("model_type", "kpipe's model is GPT-2's (learned positions, LayerNorm, tanh GeLU); it reads model_type \"gpt2\"");
  const auto integer = [&](const char* key, int least) {
    if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<std::int64_t>() < least ||
        c[key].get<std::int64_t>() > (1 << 30))
      refuse(key, fmt::format("expected an integer >= {}", least));
    return int(c[key].get<std::int64_t>());
  };
  // What transformers' GPT2Config takes when a key is absent.
  const auto flag = [&](const char* key, bool otherwise) {
    if (!c.contains(key)) return otherwise;
    if (!c[key].is_boolean()) refuse(key, "expected true or false");
    return c[key].get<bool>();
  };
  Gpt2Model out;
  ModelConfig& m = out.model;
  m.vocab = integer("vocab_size", 256);
  m.seq_len = integer("n_positions", 2);
  m.d_model = integer("n_embd", 1);
  m.n_layers = integer("n_layer", 1);
  m.n_heads = integer("n_head", 1);
  if (m.d_model % m.n_heads != 0) refuse("n_head", fmt::format("does not divide n_embd = {}", m.d_model));
  m.mlp_ratio = 4;
  if (c.contains("n_inner") && !c["n_inner"].is_null()) {
    const int inner = integer("n_inner", 1);
    if (inner % m.d_model != 0)
      refuse("n_inner", fmt::format("kpipe's MLP is a whole multiple of n_embd = {} wide", m.d_model));
    m.mlp_ratio = inner / m.d_model;
  }
  const std::string activation = c.contains("activation_function") ? c["activation_function"].dump() : "\"gelu_new\"";
  if (activation != "\"gelu_new\"" && activation != "\"gelu_pytorch_tanh\"")
    refuse("activation_function", "kpipe's GeLU is the tanh approximation (gelu_new)");
  if (c.contains("layer_norm_epsilon")) {
    if (!c["layer_norm_epsilon"].is_number() || c["layer_norm_epsilon"].get<double>() <= 0)
      refuse("layer_norm_epsilon", "expected a positive number");
    m.ln_eps = c["layer_norm_epsilon"].get<double>();
  }
  if (c.contains("initializer_range") && c["initializer_range"].is_number()) m.init_std = c["initializer_range"].get<double>();
  if (!flag("scale_attn_weights", true)) refuse("scale_attn_weights", "kpipe scales attention scores by 1/sqrt(head_dim)");
  if (flag("scale_attn_by_inverse_layer_idx", false))
    refuse("scale_attn_by_inverse_layer_idx", "kpipe scales attention scores by 1/sqrt(head_dim) alone");
  if (flag("add_cross_attention", false)) refuse("add_cross_attention", "kpipe's blocks have self-attention only");
  out.tied = flag("tie_word_embeddings", true);
  return out;
}

}  // namespace kpipe::io
