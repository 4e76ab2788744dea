#pragma once
// The smallest model the I/O tests train: 2 blocks, d_model 16, seq_len 8, batch 4 in 2 micro-batches.
#include "kpipe/core/config.hpp"

namespace kpipe::test {

inline Config tiny_config(int steps) {
  Config c;
  c.model.seq_len = 8;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 2;
  c.train.batch = 4;
  c.train.microbatches = 2;
  c.train.steps = steps;
  c.optim.warmup_steps = 1;
  return c;
}

}  // namespace kpipe::test
