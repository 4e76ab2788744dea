#pragma once
// A small model under an asynchronous schedule (pipedream, with vertical sync or not, or 2bw), as the MPI
// tests of those schedules train it: 2 blocks, d_model 32, seq_len 16, 2 sequences per micro-batch.
#include <string>

#include "kpipe/core/config.hpp"

namespace kpipe::test {

inline Config async_config(const std::string& schedule, int vertical_sync, int stages, int microbatches, int steps) {
  Config c;
  c.model.seq_len = 16;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_layers = 2;
  c.train.batch = 2 * microbatches;
  c.train.microbatches = microbatches;
  c.train.steps = steps;
  c.train.eval_batches = 2;
  c.optim.warmup_steps = 1;
  c.optim.grad_clip = 0.5;
  c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
  c.pipeline.vertical_sync = vertical_sync;
  c.pipeline.pipeline_size = stages;
  return c;
}

}  // namespace kpipe::test
