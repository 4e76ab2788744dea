#pragma once
// Layers -> virtual stages: each virtual stage gets a contiguous range of global layer indices, in order
// (virtual stage k = chunk c of rank r with k = c*p + r, see schedule/schedule.hpp). Every stage gets at
// least one layer.
//   uniform:  by count, as evenly as possible; the first (layers % stages) stages get one layer more.
//   balanced: minimizes the time of the slowest stage (dynamic program, exact); among the partitions that
//             reach that minimum, the one with the smallest peak stage memory (when memory is given), then
//             the smallest sum of squared stage times, then the one whose boundaries come last (earlier
//             stages get the extra layers, as in uniform), so that the result is deterministic and equal
//             costs give the uniform partition.
// For a model, time is FLOPs (forward and backward) and memory is parameter state plus the activations of
// the micro-batches a stage holds at its peak, so the vocabulary counts twice: the LM head's products grow
// with it (6 T C V FLOPs per sequence: the last stage gets fewer blocks as it grows), and so do the V x C
// tables of the embedding and the head with their gradients and optimizer moments (which, among equally
// fast partitions, keep blocks off the first stage, where 1F1B also holds the most micro-batches).
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/model/desc.hpp"

namespace kpipe::partition {

struct LayerRange {
  int first = 0, last = 0;  // [first, last)
  int size() const { return last - first; }
  friend bool operator==(const LayerRange& a, const LayerRange& b) { return a.first == b.first && a.last == b.last; }
};

// Memory, for the balanced method: a stage holding layers [a, b) at position k needs
// sum(state[a..b)) + in_flight[k] * sum(stash[a..b)), in any unit.
struct LayerMemory {
  std::vector<double> state;      // per layer: held whatever the schedule (parameters, gradients, moments)
  std::vector<double> stash;      // per layer: per micro-batch in flight (activations kept for backward)
  std::vector<double> in_flight;  // per stage: micro-batches held at the peak
};

// Generic form; errors name the stage and layer counts.
std::vector<LayerRange> partition_layers(const std::vector<double>& layer_costs, int stages, PartitionKind method,
                                         const LayerMemory& memory = {});

// How a run holds micro-batches: per rank, the most in flight at once (schedule::peak_stash of its
// schedule; empty: 1F1B's bound, ranks - r on rank r), and the sequences in each.
struct InFlight {
  std::vector<int> per_rank;
  int sequences = 1;
  // Per layer, the elements one sequence keeps in flight; empty: the model's stash_elems (nothing
  // recomputed). configured_partition fills it under activation recomputation (partition/configured.hpp).
  std::vector<double> kept_per_sequence = {};
};

// For a model on `ranks` ranks with `chunks` chunks each (ranks*chunks virtual stages); errors name
// pipeline.pipeline_size and pipeline.chunks.
std::vector<LayerRange> partition_layers(const model::ModelDesc& model, int ranks, int chunks, PartitionKind method,
                                         const InFlight& in_flight = {});

// Per layer: forward + backward (input and weight) FLOPs per sequence, the time the balanced method evens out.
std::vector<double> layer_costs(const model::ModelDesc& model);

// Per layer, in scalars: state = 4 per parameter (value, gradient, two optimizer moments); stash = the
// activations kept per micro-batch of `sequences` sequences. in_flight is per virtual stage: a rank's peak
// shared among its chunks.
LayerMemory layer_memory(const model::ModelDesc& model, int ranks, int chunks, const InFlight& in_flight);

// Per stage: its memory under `memory` (same units).
std::vector<double> stage_memory(const LayerMemory& memory, const std::vector<LayerRange>& ranges);

// Sum of the costs of each range.
std::vector<double> stage_costs(const std::vector<double>& layer_costs, const std::vector<LayerRange>& ranges);


}  // namespace kpipe::partition
