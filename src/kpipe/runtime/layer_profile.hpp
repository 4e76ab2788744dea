#pragma once
// kpipe-train --output.profile: the per-layer times a stage measured (StageModel::profile_layers), averaged
// per layer kind and per sequence, written by world rank 0 as a planner::Profile for kpipe-sim recommend.
#include <string>

#include "kpipe/runtime/stage_model.hpp"

namespace kpipe::runtime {

// Collective over the trainer's world. optimizer_seconds: this rank's mean optimizer time per step.
template <class T, class A>
void write_layer_profile(const StageModel<T, A>& stage, const std::string& path, double optimizer_seconds, int steps);

}  // namespace kpipe::runtime
