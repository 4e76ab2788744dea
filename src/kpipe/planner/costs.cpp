#include "kpipe/planner/costs.hpp"

#include <algorithm>

#include "kpipe/core/error.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/planner/roofline_profile.hpp"

namespace kpipe::planner {

double recompute_share(const ModelConfig& m, nn::Recompute mode) {
  const double t = m.seq_len, c = m.d_model, f = double(m.mlp_ratio) * m.d_model, h = m.n_heads;
  // desc.cpp's count of a block's forward: the four products, attention's two, the elementwise passes.
  const double linear = 2.0 * t * (3 * c * c + c * c + 2 * c * f);
  const double attention = 4.0 * t * t * c, softmax = 5.0 * t * t * h;
  const double forward = linear + attention + t * (10.0 * c + 8.0 * f) + softmax;
  switch (mode) {
    case nn::Recompute::none: return 0;
    case nn::Recompute::attention: return (attention + softmax) / forward;          // the core, from q|k|v
    case nn::Recompute::mlp: return (2.0 * t * c * f + 8.0 * t * f) / forward;       // fc and GeLU, from ln2
    case nn::Recompute::block: return (forward - 2.0 * t * f * c) / forward;         // all but the last product
  }
  return 0;
}

std::vector<std::array<double, 4>> layer_seconds(const model::ModelDesc& desc, const Machine& machine,
                                                 nn::Recompute mode) {
  std::vector<std::array<double, 4>> seconds;
  const double share = recompute_share(desc.config, mode);
  for (const auto& layer : desc.layers) {
    std::array<double, 4> s{};
    if (machine.profile) {
      const Profile& p = *machine.profile;
      require(profile_fits(p, desc.config),
              "--profile: measured for vocab {}, seq_len {}, d_model {}, n_heads {}, mlp_ratio {}; the model has {}, {}, "
              "{}, {}, {}", p.model.vocab, p.model.seq_len, p.model.d_model, p.model.n_heads, p.model.mlp_ratio,
              desc.config.vocab, desc.config.seq_len, desc.config.d_model, desc.config.n_heads, desc.config.mlp_ratio);
      s = layer.kind == model::LayerKind::embedding ? p.embedding : layer.kind == model::LayerKind::head ? p.head : p.block;
      if (layer.kind == model::LayerKind::block && !(p.recompute == mode && s[3] > 0)) s[3] = s[0] * share;
    } else {
      const double rate = machine.flops_per_second;
      s = {layer.forward_flops / rate, layer.backward_input_flops / rate, layer.backward_weight_flops / rate, 0};
      if (layer.kind == model::LayerKind::block) s[3] = s[0] * share;
    }
    if (mode == nn::Recompute::none || layer.kind != model::LayerKind::block) s[3] = 0;
    seconds.push_back(s);
  }
  return seconds;
}

std::vector<schedule::Costs> stage_costs(const model::ModelDesc& desc, const std::vector<std::array<double, 4>>& layers,
                                         const std::vector<partition::LayerRange>& ranges, double sequences,
                                         const schedule::Costs& base) {
  std::vector<schedule::Costs> costs;
  for (const auto& range : ranges) {
    schedule::Costs c = base;
    c.f = c.i = c.w = c.r = 0;
    double parameters = 0;
    for (int l = range.first; l < range.last; ++l) {
      c.f += layers.at(std::size_t(l))[0] * sequences;
      c.i += layers[std::size_t(l)][1] * sequences;
      c.w += layers[std::size_t(l)][2] * sequences;
      c.r += layers[std::size_t(l)][3] * sequences;
      parameters += double(desc.layers.at(std::size_t(l)).num_params());
    }
    c.b = c.i + c.w;
    c.gradient_bytes = parameters * sizeof(float);
    costs.push_back(c);
  }
  return costs;
}

std::vector<schedule::Costs> stage_costs(const Config& config, const model::ModelDesc& desc,
                                         const schedule::Replicated& replicated, const Machine& given) {
  const schedule::Schedule& s = replicated.replicas.front();
  const double sequences = double(config.train.batch) / config.train.microbatches;
  Machine machine = given;
  if (machine.gpu && !machine.profile)
    machine.profile = roofline_profile(config.model, std::max(1, int(sequences)), config.train.precision, *machine.gpu);
  schedule::Costs base;
  base.latency = machine.latency;
  base.per_byte = 1.0 / machine.bytes_per_second;
  base.activation_bytes =
      sequences * config.model.seq_len * config.model.d_model * activation_bytes(config.train.precision);
  const auto ranges = partition::configured_partition(config, desc, replicated);
  auto costs = stage_costs(desc, layer_seconds(desc, machine, config.memory.recompute), ranges,
                           sequences, base);
  // The optimizer step of each rank's parameters, charged to its chunk 0.
  const double per_parameter =
      machine.profile ? machine.profile->optimizer : machine.optimizer_seconds_per_parameter;
  std::vector<double> rank_parameters(s.ranks, 0);
  for (int k = 0; k < s.virtual_stages(); ++k) rank_parameters[s.rank_of(k)] += costs[k].gradient_bytes / sizeof(float);
  for (int r = 0; r < s.ranks; ++r) costs[s.virtual_stage(r, 0)].step = rank_parameters[r] * per_parameter;
  return costs;
}

}  // namespace kpipe::planner
