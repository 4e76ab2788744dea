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
//  - an update applies gradients computed on the versions its micro-batches read and applies them to the newest:
//    each is (newest - version read) updates stale. pipedream's one is min(u, D) for update u, D = p - 1 - s
//    (pipedream), p - 1 (vertical sync); 2bw's first p - 1 of m are 1 stale, the rest fresh (0 in window 0).
//    Its optimizer step takes the first moment extrapolated some updates on (nn/optimizer.hpp's look-ahead),
//    an estimate of the moment fresh gradients would have built: pipedream's by its delay, 2bw's by twice its
//    micro-batches' mean delay, 2 (p - 1) / m; with p = 1 neither schedule has a delay;
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
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/model/parameters.hpp"
#include "kpipe/nn/views.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

struct AsyncRules {
  schedule::Updates updates = schedule::Updates::pipedream;
  int microbatches = 1;            // per step and replica (train.microbatches / pipeline.data_parallel)
  int replicas = 1;                // pipeline.data_parallel
  int sequences_per_microbatch = 1;
  int seq_len = 1;
  std::int64_t steps = 1;          // train.steps
  int stages = 1;                  // pipeline.pipeline_size

  static AsyncRules of(const Config& config);  // config.pipeline.schedule must be pipedream or 2bw

  bool per_microbatch() const { return updates != schedule::Updates::two_bw; }
  int updates_per_step() const { return per_microbatch() ? microbatches : 1; }
  // The update that applies micro-batch k's gradient (k over the run).
  std::int64_t update_of(std::int64_t microbatch) const { return per_microbatch() ? microbatch : microbatch / microbatches; }
  double learning_rate(const OptimizerConfig& optim, std::int64_t update) const;
  // How many updates stale the oldest gradient that update `update` applies on stage `stage` is, and the mean
  // over its micro-batches (the update's look-ahead), both from the version rule (schedule/asynchronous.hpp).
  int delay(int stage, std::int64_t update) const;
  double mean_delay(int stage, std::int64_t update) const;
  double lookahead(int stage, std::int64_t update) const;  // in updates, see above
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

// Stage `stage`'s update `update` from its accumulated gradients (zeroed as they are read): the stage's
// gradient norm (per layer, in layer order), clipping by it, AdamW or SGD with the update's look-ahead, from
// the weights `from` (the newest version: the store's values, or another buffer of their layout) into the
// store's values, in one pass over the buffers. Returns the squared norm. A non-finite norm skips the update
// (the store's values become `from`'s; the gradients are zeroed all the same). The compute copy (mixed
// precision) follows the new weights.
template <class T, class A>
double apply_async_update(const ExecSpace& space, const OptimizerConfig& optim, const AsyncRules& rules, int stage,
                          std::int64_t update, model::ParameterStore<T, A>& params, nn::In1<T> from);

// The lr schedule a delay calls for (docs/schedules.md, "A stable step under delay"). A gradient `delay`
// updates stale makes the largest stable step shrink with the delay, and a fast warm-up overshoots before
// the delayed gradients turn: the peak lr is divided by sqrt(1 + delay) and the warm-up lengthened by the
// same factor (so the lr rises (1 + delay) times slower). The schedule's largest delay counts:
// largest_delay() = p - 1 for pipedream and vertical sync, 1 for 2bw (0 on one stage), 0 for the synchronous
// schedules.
int largest_delay(const PipelineConfig& pipeline);
double delay_factor(int delay);  // sqrt(1 + delay)
OptimizerConfig stable_schedule(const OptimizerConfig& synchronous, int delay);

// The optimizer settings a run takes. `preset` is what the defaults and the preset gave (a synchronous
// schedule's), `given` the keys the user gave (a --config file, the command line). What the user gave
// stays; under pipedream optim.lr and optim.warmup_steps left to kpipe come from stable_schedule(), and
// optim.min_lr left to kpipe stays at most the peak. The note (one line, or empty) says which lr the schedule
// took, or that a given lr is above the one it considers stable; under 2bw (which keeps the preset's lr, its
// look-ahead making up for its few stale micro-batches) how many read the old weights and what that cost.
struct OptimizerChoice {
  OptimizerConfig optim;
  std::string note;
};
OptimizerChoice choose_optimizer(const Config& config, const OptimizerConfig& preset,
                                 const std::vector<std::string>& given);

}  // namespace kpipe::runtime
