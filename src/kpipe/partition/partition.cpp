#include "kpipe/partition/partition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kpipe/core/error.hpp"

namespace kpipe::partition {

namespace {

constexpr double infinite = std::numeric_limits<double>::infinity();

// Range sums as differences of prefix sums, computed the same way everywhere so that comparisons are exact.
struct PrefixSums {
  std::vector<double> sums;
  explicit PrefixSums(const std::vector<double>& costs) : sums(costs.size() + 1, 0.0) {
    for (std::size_t i = 0; i < costs.size(); ++i) sums[i + 1] = sums[i] + costs[i];
  }
  double range(int first, int last) const { return sums[last] - sums[first]; }
};

std::vector<LayerRange> uniform(int layers, int stages) {
  std::vector<LayerRange> ranges;
  const int base = layers / stages, extra = layers % stages;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    const int size = base + (s < extra ? 1 : 0);
    ranges.push_back({first, first + size});
    first += size;
  }
  return ranges;
}

// The smallest achievable cost of the slowest stage.
double min_bottleneck(const PrefixSums& cost, int layers, int stages) {
  // best[i]: the smallest bottleneck of layers [0, i) in s stages (s grows one per pass).
  std::vector<double> best(layers + 1, infinite), next(layers + 1);
  best[0] = 0;
  for (int s = 1; s <= stages; ++s) {
    std::fill(next.begin(), next.end(), infinite);
    for (int i = s; i <= layers; ++i)
      for (int j = s - 1; j < i; ++j) next[i] = std::min(next[i], std::max(best[j], cost.range(j, i)));
    best.swap(next);
  }
  return best[layers];
}

std::vector<LayerRange> balanced(const std::vector<double>& costs, int stages) {
  const int layers = int(costs.size());
  const PrefixSums cost(costs);
  const double bound = min_bottleneck(cost, layers, stages);
  // squares[s][i]: smallest sum of squared stage costs of layers [i, layers) in s stages, none above bound;
  // end[s][i]: the first stage's end in the last (largest) choice that reaches it. Taking the last choice at
  // every step gives the lexicographically largest boundaries among the optimal partitions: earlier stages
  // get the extra layers, as in uniform (equal costs give uniform's partition).
  std::vector<std::vector<double>> squares(stages + 1, std::vector<double>(layers + 1, infinite));
  std::vector<std::vector<int>> end(stages + 1, std::vector<int>(layers + 1, -1));
  squares[0][layers] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = 0; i + s <= layers; ++i)
      for (int j = i + 1; j + (s - 1) <= layers; ++j) {
        const double c = cost.range(i, j);
        if (c > bound || squares[s - 1][j] == infinite) continue;
        const double candidate = c * c + squares[s - 1][j];
        if (candidate <= squares[s][i]) {
          squares[s][i] = candidate;
          end[s][i] = j;
        }
      }
  std::vector<LayerRange> ranges;
  for (int s = stages, first = 0; s >= 1; --s) {
    ranges.push_back({first, end[s][first]});
    first = end[s][first];
  }
  return ranges;
}

}  // namespace

const std::vector<std::string>& partition_methods() {
  static const std::vector<std::string> methods{"uniform", "balanced"};
  return methods;
}

std::vector<LayerRange> partition_layers(const std::vector<double>& layer_costs, int stages, const std::string& method) {
  const int layers = int(layer_costs.size());
  require(stages >= 1 && stages <= layers,
          "partition: {} stages for {} layers: need between 1 and {} (at least one layer per stage)", stages, layers,
          layers);
  for (int i = 0; i < layers; ++i)
    require(layer_costs[i] >= 0 && std::isfinite(layer_costs[i]), "partition: layer {} cost {}: must be a "
            "non-negative number", i, layer_costs[i]);
  if (method == "uniform") return uniform(layers, stages);
  if (method == "balanced") return balanced(layer_costs, stages);
  throw InputError(fmt::format("pipeline.partition = '{}': unknown method (uniform, balanced)", method));
}

std::vector<LayerRange> partition_layers(const model::ModelDesc& model, int ranks, int chunks, const std::string& method) {
  const int layers = int(model.layers.size());
  require(ranks >= 1, "pipeline.pipeline_size = {}: need at least one stage", ranks);
  require(chunks >= 1, "pipeline.chunks = {}: need at least one chunk per rank", chunks);
  require(ranks * chunks <= layers,
          "pipeline.pipeline_size = {} x pipeline.chunks = {} = {} virtual stages for a model of {} layers "
          "(embedding, {} blocks, head): at most one stage per layer",
          ranks, chunks, ranks * chunks, layers, layers - 2);
  return partition_layers(layer_costs(model), ranks * chunks, method);
}

std::vector<double> layer_costs(const model::ModelDesc& model) {
  std::vector<double> costs;
  costs.reserve(model.layers.size());
  for (const auto& layer : model.layers)
    costs.push_back(layer.forward_flops + layer.backward_input_flops + layer.backward_weight_flops);
  return costs;
}

std::vector<double> stage_costs(const std::vector<double>& layer_costs, const std::vector<LayerRange>& ranges) {
  const PrefixSums cost(layer_costs);
  std::vector<double> costs;
  costs.reserve(ranges.size());
  for (const auto& range : ranges) costs.push_back(cost.range(range.first, range.last));
  return costs;
}

}  // namespace kpipe::partition
