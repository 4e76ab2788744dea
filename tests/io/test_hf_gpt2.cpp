// kpipe's model as transformers' GPT-2: every parameter has one counterpart, products transposed (Conv1D), config.json
// read back into the same model; what kpipe's model cannot be is refused naming the key.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/io/hf_gpt2.hpp"

namespace kpipe {
namespace {

ModelConfig small_model() {
  ModelConfig m;
  m.vocab = 300;
  m.seq_len = 32;
  m.d_model = 48;
  m.n_layers = 3;
  m.n_heads = 6;
  m.mlp_ratio = 2;
  m.ln_eps = 1e-6;
  return m;
}

TEST(HfGpt2, EveryParameterHasOneCounterpartOfTheTransposedShapeWhereAProductReadsIt) {
  const auto desc = model::describe(small_model());
  const auto tensors = io::gpt2_tensors(desc);
  std::size_t params = 0;
  for (const auto& layer : desc.layers) params += layer.params.size();
  ASSERT_EQ(tensors.size(), params);
  std::set<std::string> names;
  for (const auto& t : tensors) EXPECT_TRUE(names.insert(t.hf).second) << t.hf;
  const auto find = [&](const std::string& kpipe) {
    for (const auto& t : tensors)
      if (t.kpipe == kpipe) return t;
    ADD_FAILURE() << kpipe;
    return io::Gpt2Tensor{};
  };
  const auto qkv = find("layers/02/attn/qkv/weight");
  EXPECT_EQ(qkv.hf, "transformer.h.1.attn.c_attn.weight");
  EXPECT_TRUE(qkv.transposed);
  EXPECT_EQ(qkv.hf_shape(), (std::vector<std::int64_t>{48, 144}));
  EXPECT_EQ(find("layers/03/mlp/proj/weight").hf_shape(), (std::vector<std::int64_t>{96, 48}));
  EXPECT_EQ(find("layers/00/wte").hf, "transformer.wte.weight");
  EXPECT_FALSE(find("layers/04/lm_head/weight").transposed);  // [vocab, d_model] in both
  EXPECT_EQ(find("layers/04/ln_f/beta").hf, "transformer.ln_f.bias");
  EXPECT_EQ(io::transposed({1, 2, 3, 4, 5, 6}, 2, 3), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(HfGpt2, ConfigJsonGivesTheModelBack) {
  const ModelConfig m = small_model();
  const auto back = io::gpt2_model(io::gpt2_config_json(m, -1, "float32"), "config.json");
  EXPECT_FALSE(back.tied);
  EXPECT_EQ(back.model.vocab, m.vocab);
  EXPECT_EQ(back.model.seq_len, m.seq_len);
  EXPECT_EQ(back.model.d_model, m.d_model);
  EXPECT_EQ(back.model.n_layers, m.n_layers);
  EXPECT_EQ(back.model.n_heads, m.n_heads);
  EXPECT_EQ(back.model.mlp_ratio, m.mlp_ratio);
  EXPECT_EQ(back.model.ln_eps, m.ln_eps);
  // GPT-2's own config.json: n_inner null (4 n_embd), its head tied.
  const auto gpt2 = io::gpt2_model(R"({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768,
      "n_layer": 12, "n_head": 12, "n_inner": null, "activation_function": "gelu_new"})", "config.json");
  EXPECT_TRUE(gpt2.tied);
  EXPECT_EQ(gpt2.model.mlp_ratio, 4);
}

TEST(HfGpt2, WhatKpipesModelCannotBeIsRefusedNamingTheKey) {
  const std::string base = R"("vocab_size": 300, "n_positions": 32, "n_embd": 48, "n_layer": 2, "n_head": 6)";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"model_type": "llama", )" + base + "}", "model_type = \"llama\""},
      {R"({"model_type": "gpt_neox", "rotary_pct": 0.25, )" + base + "}", "model_type = \"gpt_neox\""},
      {R"({"model_type": "gpt2", "activation_function": "relu", )" + base + "}", "activation_function = \"relu\""},
      {R"({"model_type": "gpt2", "n_inner": 100, )" + base + "}", "n_inner = 100"},
      {R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true, )" + base + "}", "scale_attn_by_inverse_layer_idx"},
      {R"({"model_type": "gpt2", "add_cross_attention": true, )" + base + "}", "add_cross_attention"},
      {R"({"model_type": "gpt2", "vocab_size": 100, "n_positions": 32, "n_embd": 48, "n_layer": 2, "n_head": 6})", "vocab_size = 100"},
      {R"({"model_type": "gpt2", "vocab_size": 300, "n_positions": 32, "n_embd": 48, "n_layer": 2, "n_head": 5})", "n_head = 5"},
      {R"({"model_type": "gpt2", "vocab_size": 300, "n_embd": 48, "n_layer": 2, "n_head": 6})", "n_positions = (absent)"},
      {"not json", "not a JSON object"},
  };
  for (const auto& [text, says] : cases) {
    try {
      io::gpt2_model(text, "'m/config.json'");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("'m/config.json': ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace kpipe
