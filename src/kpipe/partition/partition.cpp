#include "kpipe/partition/partition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

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

// Stage k's memory for layers [first, last).
struct MemoryModel {
  PrefixSums state, stash;
  std::vector<double> in_flight;
  bool empty;
  explicit MemoryModel(const LayerMemory& m)
      : state(m.state), stash(m.stash), in_flight(m.in_flight), empty(m.state.empty()) {}
  double of(int stage, int first, int last) const {
    return empty ? 0.0 : state.range(first, last) + in_flight[stage] * stash.range(first, last);
  }
};

// The smallest achievable peak stage memory among the partitions whose every stage takes at most time_bound.
double min_peak_memory(const PrefixSums& cost, const MemoryModel& memory, int layers, int stages, double time_bound) {
  if (memory.empty) return 0;
  // best[s][i]: the smallest peak memory of layers [i, layers) in the last s stages.
  std::vector<double> best(layers + 1, infinite), next(layers + 1);
  best[layers] = 0;
  for (int s = 1; s <= stages; ++s) {
    std::fill(next.begin(), next.end(), infinite);
    const int stage = stages - s;  // the first of the s stages
    for (int i = 0; i + s <= layers; ++i)
      for (int j = i + 1; j + (s - 1) <= layers; ++j)
        if (cost.range(i, j) <= time_bound && best[j] < infinite)
          next[i] = std::min(next[i], std::max(best[j], memory.of(stage, i, j)));
    best.swap(next);
  }
  return best[0];
}

std::vector<LayerRange> balanced(const std::vector<double>& costs, int stages, const LayerMemory& layer_memory) {
  const int layers = int(costs.size());
  const PrefixSums cost(costs);
  const MemoryModel memory(layer_memory);
  const double bound = min_bottleneck(cost, layers, stages);
  const double memory_bound = min_peak_memory(cost, memory, layers, stages, bound);
  // squares[s][i]: smallest sum of squared stage costs of layers [i, layers) in s stages, none above the time
  // bound nor the memory bound; end[s][i]: the first stage's end in the last (largest) choice that reaches it.
  // Taking the last choice at every step gives the lexicographically largest boundaries among the optimal
  // partitions: earlier stages get the extra layers, as in uniform (equal costs give uniform's partition).
  std::vector<std::vector<double>> squares(stages + 1, std::vector<double>(layers + 1, infinite));
  std::vector<std::vector<int>> end(stages + 1, std::vector<int>(layers + 1, -1));
  squares[0][layers] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = 0; i + s <= layers; ++i)
      for (int j = i + 1; j + (s - 1) <= layers; ++j) {
        const double c = cost.range(i, j);
        if (c > bound || squares[s - 1][j] == infinite || memory.of(stages - s, i, j) > memory_bound) continue;
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

std::vector<LayerRange> partition_layers(const std::vector<double>& layer_costs, int stages, PartitionKind method,
                                         const LayerMemory& memory) {
  const int layers = int(layer_costs.size());
  require(stages >= 1 && stages <= layers,
          "partition: {} stages for {} layers: need between 1 and {} (at least one layer per stage)", stages, layers,
          layers);
  for (int i = 0; i < layers; ++i)
    require(layer_costs[i] >= 0 && std::isfinite(layer_costs[i]), "partition: layer {} cost {}: must be a "
            "non-negative number", i, layer_costs[i]);
  if (!memory.state.empty() &&
      (int(memory.state.size()) != layers || int(memory.stash.size()) != layers || int(memory.in_flight.size()) != stages))
    throw std::invalid_argument(fmt::format("partition: memory of {} and {} layers, {} stages; expected {} layers, {} "
                                            "stages", memory.state.size(), memory.stash.size(), memory.in_flight.size(),
                                            layers, stages));
  return method == PartitionKind::uniform ? uniform(layers, stages) : balanced(layer_costs, stages, memory);
}

std::vector<LayerRange> partition_layers(const model::ModelDesc& model, int ranks, int chunks, PartitionKind method,
                                         const InFlight& in_flight) {
  const int layers = int(model.layers.size());
  require(ranks >= 1, "pipeline.pipeline_size = {}: need at least one stage", ranks);
  require(chunks >= 1, "pipeline.chunks = {}: need at least one chunk per rank", chunks);
  require(ranks * chunks <= layers,
          "pipeline.pipeline_size = {} x pipeline.chunks = {} = {} virtual stages for a model of {} layers "
          "(embedding, {} blocks, head): at most one stage per layer",
          ranks, chunks, ranks * chunks, layers, layers - 2);
  return partition_layers(layer_costs(model), ranks * chunks, method, layer_memory(model, ranks, chunks, in_flight));
}

LayerMemory layer_memory(const model::ModelDesc& model, int ranks, int chunks, const InFlight& in_flight) {
  LayerMemory memory;
  const auto& kept = in_flight.kept_per_sequence;
  if (!kept.empty() && kept.size() != model.layers.size())
    throw std::invalid_argument(fmt::format("partition: kept_per_sequence of {} layers; the model has {}", kept.size(),
                                            model.layers.size()));
  for (std::size_t l = 0; l < model.layers.size(); ++l) {
    const auto& layer = model.layers[l];
    memory.state.push_back(4.0 * double(layer.num_params()));
    const double per_sequence = kept.empty() ? double(layer.stash_elems) : kept[l];
    memory.stash.push_back(per_sequence * std::max(in_flight.sequences, 1));
  }
  // Virtual stage k = c * ranks + r lives on rank r, which shares its peak among its chunks.
  for (int k = 0; k < ranks * chunks; ++k) {
    const int r = k % ranks;
    const int peak = in_flight.per_rank.empty() ? ranks - r : in_flight.per_rank.at(std::size_t(r));
    memory.in_flight.push_back(double(peak) / chunks);
  }
  return memory;
}

std::vector<double> stage_memory(const LayerMemory& memory, const std::vector<LayerRange>& ranges) {
  const MemoryModel model(memory);
  std::vector<double> bytes;
  for (std::size_t k = 0; k < ranges.size(); ++k) bytes.push_back(model.of(int(k), ranges[k].first, ranges[k].last));
  return bytes;
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
