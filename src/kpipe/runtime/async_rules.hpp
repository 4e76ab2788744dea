#pragma once
// What an asynchronous run (schedule/asynchronous.hpp) means for the optimizer and the data, shared by the
// MPI runtime and the single-process reference (async_reference.hpp) so that both follow one definition
// (docs/schedules.md, "Asynchronous schedules"):
//  - a step is m micro-batches (train.microbatches), as in synchronous training: train.steps, logging,
//    metrics, evaluation and checkpoints count steps;
//  - pipedream / vertical sync update every stage after each micro-batch's backward: update u (0-based, the
//    micro-batch's index over the run) uses the lr schedule at the fraction u / m of a step (optim.warmup_steps
//    and optim.decay_steps keep counting steps) and AdamW's bias correction counts updates (u + 1); the
//    gradient is the micro-batch's mean, so with p = 1 this is plain training with one micro-batch per step
//    and m times as many steps, bit for bit;
//  - 2bw updates once per step, with the step's lr and step counter, the gradient the mini-batch's mean
//    (as the synchronous schedules);
//  - gradient clipping bounds each stage's norm of the gradient its update applies (the stages update at
//    different times, so there is no global norm of one update without a flush); with p = 1 that is the
//    global norm;
//  - micro-batch k of pipedream draws the training windows plain training with one micro-batch per step
//    draws at step k; 2bw's draw the synchronous step's;
//  - with d data-parallel replicas each runs the lists on m / d micro-batches per step, and every update
//    applies the sum of the d replicas' gradients (runtime/gradient_reduction.hpp): pipedream's update k the
//    d micro-batches k of the replicas, replica r's drawing sequences r*b .. r*b+b-1 of plain training's step
//    k (b sequences per micro-batch); 2bw's replica r takes micro-batches r*m/d .. of the synchronous step,
//    as the synchronous "allreduce" layout does. The mean is over all the update's sequences.
#include <cstdint>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/model/parameters.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

struct AsyncRules {
  schedule::Updates updates = schedule::Updates::pipedream;
  int microbatches = 1;            // per step and replica (train.microbatches / pipeline.data_parallel)
  int replicas = 1;                // pipeline.data_parallel
  int sequences_per_microbatch = 1;
  int seq_len = 1;
  std::int64_t steps = 1;          // train.steps

  static AsyncRules of(const Config& config);  // config.pipeline.schedule must be pipedream or 2bw

  bool per_microbatch() const { return updates != schedule::Updates::two_bw; }
  int updates_per_step() const { return per_microbatch() ? microbatches : 1; }
  // The update that applies micro-batch k's gradient (k over the run).
  std::int64_t update_of(std::int64_t microbatch) const { return per_microbatch() ? microbatch : microbatch / microbatches; }
  double learning_rate(const OptimizerConfig& optim, std::int64_t update) const;
  // Multiplies the sum of the per-token losses' gradients into the mean that one update applies.
  double loss_scale() const;
  // The sampler's (step, first sequence) of replica r's micro-batch k's windows.
  std::int64_t sampler_step(std::int64_t microbatch) const;
  int first_sequence(std::int64_t microbatch, int replica) const;
  // Where replica r's micro-batch k's loss goes among a step's m micro-batches (the step's loss adds them in
  // this order).
  int loss_index(std::int64_t microbatch, int replica) const {
    return replica * microbatches + int(microbatch % microbatches);
  }
};

// One stage's update `update` from its accumulated gradients (then zeroed), onto the weights in the store:
// the stage's gradient norm (per layer, in layer order), clipping by it, AdamW or SGD. Returns the squared
// norm. A non-finite norm skips the update (the gradients are zeroed all the same). The compute copy (mixed
// precision) follows the new weights.
template <class T, class A>
double apply_async_update(const ExecSpace& space, const OptimizerConfig& optim, const AsyncRules& rules,
                          std::int64_t update, model::ParameterStore<T, A>& params);

}  // namespace kpipe::runtime
