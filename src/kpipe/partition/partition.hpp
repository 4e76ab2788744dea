#pragma once
// Layers -> virtual stages: each virtual stage gets a contiguous range of global layer indices, in order
// (virtual stage k = chunk c of rank r with k = c*p + r, see schedule/schedule.hpp). Every stage gets at
// least one layer.
//   uniform:  by count, as evenly as possible; the first (layers % stages) stages get one layer more.
//   balanced: minimizes the cost of the slowest stage (dynamic program, exact); among the partitions that
//             reach that minimum, the one with the smallest sum of squared stage costs, then the one whose
//             boundaries come last (earlier stages get the extra layers, as in uniform), so that the result
//             is deterministic and equal costs give the uniform partition.
#include <string>
#include <vector>

#include "kpipe/model/desc.hpp"

namespace kpipe::partition {

struct LayerRange {
  int first = 0, last = 0;  // [first, last)
  int size() const { return last - first; }
  friend bool operator==(const LayerRange& a, const LayerRange& b) { return a.first == b.first && a.last == b.last; }
};

// Generic form; errors name pipeline.partition (unknown method) and the stage and layer counts.
std::vector<LayerRange> partition_layers(const std::vector<double>& layer_costs, int stages, const std::string& method);

// For a model on `ranks` ranks with `chunks` chunks each (ranks*chunks virtual stages); errors name
// pipeline.pipeline_size and pipeline.chunks.
std::vector<LayerRange> partition_layers(const model::ModelDesc& model, int ranks, int chunks, const std::string& method);

// Per layer: forward + backward (input and weight) FLOPs per sequence, the cost the balanced method evens out.
std::vector<double> layer_costs(const model::ModelDesc& model);

// Sum of the costs of each range.
std::vector<double> stage_costs(const std::vector<double>& layer_costs, const std::vector<LayerRange>& ranges);

const std::vector<std::string>& partition_methods();  // uniform, balanced

}  // namespace kpipe::partition
