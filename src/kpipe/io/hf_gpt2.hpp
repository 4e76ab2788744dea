#pragma once
// kpipe's GPT as Hugging Face transformers' GPT2LMHeadModel: the same model (pre-LayerNorm blocks, tanh GeLU
// ("gelu_new"), attention scores scaled by 1/sqrt(head_dim), learned positions, biases in every product, a final
// LayerNorm), except that kpipe's LM head is a tensor of its own (tie_word_embeddings false). The names and
// layouts that map one onto the other, and config.json both ways.
//
// kpipe's products store W as [out, in] (y = x W^T, nn/linear.hpp); GPT-2's Conv1D stores [in, out] (y = x W): the
// transpose. kpipe's qkv packs q | k | v along its output axis, head h in columns h*hd.. of each
// (nn/attention.hpp), which is c_attn's packing: transposing is the whole conversion.
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/model/desc.hpp"

namespace kpipe::io {

struct Gpt2Tensor {
  std::string kpipe;                // "layers/03/attn/qkv/weight" (under /model/ in a checkpoint)
  std::string hf;                   // "transformer.h.2.attn.c_attn.weight"
  std::vector<std::int64_t> shape;  // kpipe's
  bool transposed = false;          // GPT-2 stores the transpose (a Conv1D weight)
  std::vector<std::int64_t> hf_shape() const;
};

// Every parameter of the model, in kpipe's global order, with its GPT-2 counterpart.
std::vector<Gpt2Tensor> gpt2_tensors(const model::ModelDesc& desc);

// values [rows, cols] -> their transpose [cols, rows].
std::vector<float> transposed(const std::vector<float>& values, std::int64_t rows, std::int64_t cols);

// config.json of GPT2LMHeadModel for the model (no dropout: kpipe has none); `end_of_text` (< 0: none) is its
// bos and eos token.
std::string gpt2_config_json(const ModelConfig& model, Token end_of_text, const std::string& torch_dtype);
// generation_config.json: kpipe-generate's defaults (sampling at temperature 0.8 from the 40 likeliest, 200 tokens).
std::string generation_config_json(Token end_of_text);

struct Gpt2Model {
  ModelConfig model;
  bool tied = false;  // tie_word_embeddings: the LM head is the token embedding
};
// What config.json says, as kpipe's model; InputError "<label>: <key> = <value>: ..." where kpipe's model cannot
// be what it describes (another model type or activation, rotary or ALiBi positions, an MLP width that is not a
// multiple of n_embd, ...).
Gpt2Model gpt2_model(const std::string& config_json, const std::string& label);

}  // namespace kpipe::io
