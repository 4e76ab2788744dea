#pragma once
// The one step numbering a user reads, everywhere: progress lines and messages, the metrics, checkpoints'
// names and their `step`, activation traces, timelines, kpipe-inspect and the plots. Steps count from 1: step N
// is the Nth optimizer step, and once it is done N steps are done, which is what a checkpoint's step has always
// said (step-00000100.h5 holds the state after step 100; a run resumed from it goes on with step 101), and what
// the progress lines, PyTorch Lightning's and Hugging Face's global_step, and Megatron's iterations count.
// Inside kpipe a step is an index from 0 (the sampler's key, the schedule's lists, the learning-rate schedule);
// this is where an index becomes the number a user reads.
#include <cstdint>

namespace kpipe {

constexpr std::int64_t step_number(std::int64_t index) { return index + 1; }

}  // namespace kpipe
