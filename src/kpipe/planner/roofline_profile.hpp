#pragma once
// A layer profile from the work ledger's roofline on a named GPU (model/kernel_ledger.hpp, model/roofline.hpp)
// instead of a measured run: the stage costs kpipe-sim and the planner give a GPU before any GPU has run the
// model. Per layer kind, the bounds of its launches per sequence, at the micro-batch's size (a launch's fixed
// cost does not shrink with fewer sequences, so the profile is made for the size it prices).
#include "kpipe/core/config.hpp"
#include "kpipe/model/roofline.hpp"
#include "kpipe/planner/profile.hpp"

namespace kpipe::planner {

// The embedding's and head's launches are told apart by label; a block's are a two-block model's ledger less a
// one-block model's. The optimizer step: AdamW's bytes per parameter (value, gradient and both moments read and
// written; with bf16, the compute copy refreshed) at the memory's bandwidth.
Profile roofline_profile(const ModelConfig& model, int sequences, Precision precision, const model::GpuSpec& gpu);

}  // namespace kpipe::planner
