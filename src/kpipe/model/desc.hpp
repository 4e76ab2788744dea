#pragma once
// What the model is, without any memory: the ordered layer list with parameter shapes, parameter and
// FLOP counts and activation sizes. The partitioner, the performance reports and checkpoints read it.
// Layer 0 is the embedding, layers 1..n_layers the transformer blocks, the last one the head (final
// LayerNorm, LM head, loss). Parameters are named "<layer path>/<name>", e.g. "layers/03/attn/qkv/weight".
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"

namespace kpipe::model {

enum class LayerKind { embedding, block, head };

enum class Init { normal, zeros, ones };

struct ParamSpec {
  std::string name;                  // within the layer, e.g. "attn/qkv/weight"
  std::vector<std::int64_t> shape;   // row-major
  Init init = Init::normal;
  double std = 0;                    // for Init::normal
  bool decay = false;                // weight decay applies (2-D weights only)
  bool product_operand = false;      // a matrix products read: kept in the compute type too (ParameterStore)
  std::int64_t numel() const;
};

struct LayerDesc {
  int index = 0;                     // global layer index
  LayerKind kind = LayerKind::block;
  std::vector<ParamSpec> params;
  // Per sequence of seq_len tokens:
  double forward_flops = 0;
  double backward_input_flops = 0;   // gradient w.r.t. the layer's input
  double backward_weight_flops = 0;  // gradient w.r.t. its parameters
  std::int64_t stash_elems = 0;      // activations kept from forward for backward
  std::int64_t output_elems = 0;     // what crosses to the next stage

  std::string path() const;          // "layers/07"
  std::int64_t num_params() const;
};

struct ModelDesc {
  ModelConfig config;
  std::vector<LayerDesc> layers;
  std::int64_t num_params() const;
  double forward_flops_per_sequence() const;
  double backward_flops_per_sequence() const;  // input + weight gradients
};

const char* to_string(LayerKind kind);
ModelDesc describe(const ModelConfig& config);
// The parameters describe(config) would count, without describing n_layers blocks (every block has the same),
// as a double: a model too large to describe (or to count in 64 bits) still gets its figure.
double parameter_count(const ModelConfig& config);

}  // namespace kpipe::model
