#pragma once
// A layer profile: how long each kind of layer took per sequence in a real run (kpipe-train
// --output.profile FILE), for the step-time model (costs.hpp) to use instead of FLOPs at an assumed rate.
// Times depend on the layer's widths, not on how many blocks there are: a profile of a model serves every
// model with the same vocab, seq_len, d_model, n_heads and mlp_ratio.
//
// The file is TOML:
//   [model]    vocab, seq_len, d_model, n_heads, mlp_ratio, n_layers   (of the profiled run)
//   [measured] sequences (per micro-batch), recompute, steps,
//              embedding / block / head = [forward, backward_input, backward_weight, recompute] seconds per
//              sequence (means over every call after the first step), optimizer = seconds per parameter
#include <array>
#include <string>

#include "kpipe/core/config.hpp"

namespace kpipe::planner {

struct Profile {
  ModelConfig model;
  int sequences = 1;
  Recompute recompute = Recompute::none;
  int steps = 0;
  std::array<double, 4> embedding{}, block{}, head{};  // seconds per sequence: F, I, W, recompute
  double optimizer = 0;                                 // seconds per parameter and step
};

void write_profile(const std::string& path, const Profile& profile);  // InputError naming output.profile
Profile read_profile(const std::string& path);                        // InputError naming the file and key
// True when the profile's layer widths are the model's (its times apply).
bool profile_fits(const Profile& profile, const ModelConfig& model);

}  // namespace kpipe::planner
