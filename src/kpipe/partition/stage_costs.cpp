#include "kpipe/partition/stage_costs.hpp"

namespace kpipe::partition {

std::vector<schedule::Costs> stage_costs(const model::ModelDesc& model, const std::vector<LayerRange>& ranges,
                                         int sequences, const schedule::Costs& base) {
  std::vector<schedule::Costs> costs;
  for (const auto& range : ranges) {
    double f = 0, i = 0, w = 0;
    for (int l = range.first; l < range.last; ++l) {
      const auto& layer = model.layers.at(std::size_t(l));
      f += layer.forward_flops;
      i += layer.backward_input_flops;
      w += layer.backward_weight_flops;
    }
    schedule::Costs c = base;
    const double scale = double(sequences) / 1e9;
    c.f = f * scale;
    c.i = i * scale;
    c.w = w * scale;
    c.b = c.i + c.w;
    costs.push_back(c);
  }
  return costs;
}

}  // namespace kpipe::partition
