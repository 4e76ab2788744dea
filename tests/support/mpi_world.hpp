#pragma once
// What the MPI tests share: the world's rank and size, and the small model they train on every layout (seq_len 16,
// d_model 32, batch 8).
#include <mpi.h>

#include "kpipe/core/config.hpp"

namespace kpipe::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline Config small_config(int n_layers, int microbatches, int steps) {
  Config c;
  c.model.seq_len = 16;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_layers = n_layers;
  c.train.batch = 8;
  c.train.microbatches = microbatches;
  c.train.steps = steps;
  c.train.eval_batches = 2;
  c.optim.warmup_steps = 1;
  return c;
}

}  // namespace kpipe::test
