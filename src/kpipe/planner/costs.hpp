#pragma once
// The step-time model: what each action of a configuration costs, per virtual stage, for the simulator.
// Layer times come from a profile kpipe-train measured (profile.hpp), from the work ledger's roofline on a
// named GPU (roofline_profile.hpp), or from the model's FLOPs at an assumed rate; messages cost latency + bytes / bandwidth; the optimizer step a time per parameter.
// Recomputation costs the forward time of what it recomputes: measured when the profile ran with the same
// mode, else the block's forward time times the recomputed part's share of the block's forward FLOPs.
// It is kpipe's one cost model: kpipe-sim memory, recommend and schedule (where a model is named) price
// configurations with it.
#include <array>
#include <optional>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/model/roofline.hpp"
#include "kpipe/nn/block.hpp"
#include "kpipe/partition/partition.hpp"
#include "kpipe/planner/profile.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/simulate.hpp"

namespace kpipe::planner {

struct Machine {
  double flops_per_second = 1e11;     // per rank, without a profile or a GPU
  std::optional<Profile> profile;     // measured layer times (its widths must be the model's)
  std::optional<model::GpuSpec> gpu;  // without a profile: layer times from the work ledger's roofline on it
  double latency = 5e-6;              // seconds per message
  double bytes_per_second = 1e10;     // per link
  double optimizer_seconds_per_parameter = 2e-9;  // without a profile
};

// Share of a block's forward FLOPs that recomputation in `mode` runs again.
double recompute_share(const ModelConfig& model, nn::Recompute mode);

// Per layer, seconds per sequence: forward, backward_input, backward_weight, recompute (blocks only).
std::vector<std::array<double, 4>> layer_seconds(const model::ModelDesc& desc, const Machine& machine,
                                                 nn::Recompute mode);

// Per virtual stage (one per range of layers): the sums of its layers' seconds x `sequences` per
// micro-batch, f, i, w, r and b = i + w, and its weight gradients' bytes (gradient_bytes: the ordered
// reduction's running sum, float elements); latency, bandwidth, activation bytes and step from `base`.
std::vector<schedule::Costs> stage_costs(const model::ModelDesc& desc, const std::vector<std::array<double, 4>>& layers,
                                         const std::vector<partition::LayerRange>& ranges, double sequences,
                                         const schedule::Costs& base = {});

// Costs per virtual stage of `config` running `schedule` (schedule/plan.hpp: a plan's run): its layers (the
// configured partition, partition/configured.hpp) x sequences per micro-batch, messages of one activation,
// the running sum of the stage's gradients, and the optimizer step of each rank's parameters (on its chunk
// 0's virtual stage, which the step is charged to).
std::vector<schedule::Costs> stage_costs(const Config& config, const model::ModelDesc& desc,
                                         const schedule::Replicated& schedule, const Machine& machine);

}  // namespace kpipe::planner
