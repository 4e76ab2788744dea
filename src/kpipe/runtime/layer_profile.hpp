#pragma once
// kpipe-train --output.profile: the per-layer times a trainer measured (Trainer::profile_layers), averaged
// per layer kind and per sequence, written by world rank 0 as a planner::Profile for kpipe-sim --recommend.
#include <string>

#include "kpipe/runtime/trainer.hpp"

namespace kpipe::runtime {

// Collective over the trainer's world. optimizer_seconds: this rank's mean optimizer time per step.
template <class T>
void write_layer_profile(const Trainer<T>& trainer, const std::string& path, double optimizer_seconds, int steps);

}  // namespace kpipe::runtime
