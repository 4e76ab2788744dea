#pragma once
// Training on one rank: a mini-batch of `batch` sequences split into micro-batches that run forward and
// backward one after the other, gradients accumulated in micro-batch order, then one optimizer step.
// This is also the reference every pipeline layout must match bit for bit (DESIGN.md invariant 1).
#include <cstdint>
#include <memory>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/model/desc.hpp"

namespace kpipe::runtime {

struct StepStats {
  std::int64_t step = 0;    // 0-based index of the optimizer step just taken
  double loss = 0;          // mean per-token loss of the mini-batch
  double lr = 0;
  double grad_norm = 0;     // global L2 norm before clipping
  double seconds = 0;       // wall time of the step
  std::int64_t tokens = 0;  // tokens processed by the step
};

template <class T> class Trainer {
 public:
  Trainer(const Config& config, const data::Corpus& corpus);

  StepStats step();            // one optimizer step on the next mini-batch
  double evaluate();           // mean per-token loss over the validation windows
  std::int64_t next_step() const { return step_; }
  std::uint64_t param_checksum() const;
  const model::ModelDesc& desc() const { return desc_; }
  model::Chunk<T>& chunk() { return *chunk_; }

 private:
  void load_microbatch(int slot, std::int64_t step, int microbatch);
  double global_grad_norm();
  void optimizer_step(double lr, double grad_scale);

  Config config_;
  const data::Corpus* corpus_;
  model::ModelDesc desc_;
  std::unique_ptr<model::Chunk<T>> chunk_;
  ExecSpace space_;
  std::int64_t step_ = 0;
  int sequences_per_microbatch_;
  // Host staging for one micro-batch of tokens, reused every time.
  Kokkos::View<Token*, HostSpace> host_inputs_, host_targets_;
};

// Per-layer sums of squared gradients of a store, in global layer order.
template <class T> std::vector<double> layer_grad_squares(const ExecSpace& space, const model::ParameterStore<T>& store);

}  // namespace kpipe::runtime
