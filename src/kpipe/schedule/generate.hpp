#pragma once
// Schedule generators. Each returns compute actions only (F, B or I/W, and S last on every rank);
// lower() adds the messages. On every (rank, chunk) the weight gradients (B, or W when split) come in
// increasing micro-batch order, so gradients accumulate in the same order as on one rank and every
// schedule gives bit-identical weights (docs/architecture.md, property 1).
//
// Arguments: ranks = pipeline.pipeline_size, microbatches = train.microbatches, chunks = pipeline.chunks;
// bad values throw InputError naming the key.
#include <string>
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// One micro-batch at a time through every virtual stage and back before the next one starts (reference).
Schedule naive(int ranks, int microbatches, int chunks = 1);

// All forwards, then all backwards, then the step. With chunks > 1 each rank runs chunk 0's forwards, then
// chunk 1's, ...; backwards from the last chunk down.
Schedule gpipe(int ranks, int microbatches, int chunks = 1);

// PipeDream-Flush: on rank s, min(p-1-s, m) warm-up forwards, then one forward / one backward, then the
// remaining backwards. At most min(p-s, m) micro-batches in flight on rank s. One chunk per rank.
Schedule one_f_one_b(int ranks, int microbatches);

// Megatron's interleaved 1F1B with `chunks` model chunks per rank: micro-batches go through the chunks in
// groups of p, warm-up of 2(p-1-s) + (v-1)p chunk-forwards on rank s. Requires microbatches to be a multiple
// of ranks when chunks > 1 (as Megatron does); chunks == 1 is one_f_one_b.
Schedule interleaved(int ranks, int microbatches, int chunks);

// Zero-bubble ZB-H1 (Qi et al., 2023): 1F1B with the backward split into I and W; W's are deferred to fill
// the cool-down bubble while keeping at most p micro-batches in flight on every rank. One chunk per rank.
Schedule zero_bubble_h1(int ranks, int microbatches);

// Replaces every B by I then W (the split form), in place. Lowered schedules are re-lowered.
Schedule split_backward(const Schedule& s);

// The generator called `name` (one of schedule_names()); an unknown name throws InputError naming
// pipeline.schedule.
Schedule generate(const std::string& name, int ranks, int microbatches, int chunks = 1);
const std::vector<std::string>& schedule_names();  // naive, gpipe, 1f1b, interleaved, zb-h1

}  // namespace kpipe::schedule
