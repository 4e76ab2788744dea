#pragma once
// What each virtual stage of a partitioned model costs the simulator (schedule/simulate.hpp): the time of
// a forward (F), full backward (B), input-gradient backward (I) and weight-gradient backward (W) of one
// micro-batch of `sequences` sequences, from the model description's FLOPs, in GFLOP (seconds at
// 1 GFLOP/s). So kpipe-sim predicts what the balanced partition evens out, the vocabulary's head included.
#include <vector>

#include "kpipe/model/desc.hpp"
#include "kpipe/partition/partition.hpp"
#include "kpipe/schedule/simulate.hpp"

namespace kpipe::partition {

// One Costs per range (virtual stage); `base` supplies the message costs and the optimizer step.
std::vector<schedule::Costs> stage_costs(const model::ModelDesc& model, const std::vector<LayerRange>& ranges,
                                         int sequences, const schedule::Costs& base = {});

}  // namespace kpipe::partition
