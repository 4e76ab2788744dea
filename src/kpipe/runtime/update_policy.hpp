#pragma once
// How a run's weights change, as the executor and the trainer see it: where synchronous and asynchronous
// schedules differ in what the actions read and write (the trainer and the executor still branch on the plan
// for the step's share of the lists, token rows and when the report settles). FlushUpdates
// (flush_updates.hpp): the micro-batches' gradients accumulate through the step's lists and one optimizer step
// follows them, after the replicas' sum.
// VersionedUpdates (versioned_updates.hpp): every action reads the weight version the schedule names, and
// the lists' update actions U produce new versions. The executor calls the policy at the actions that touch
// weights; the trainer calls it around each step.
#include <cstdint>
#include <vector>

#include "kpipe/runtime/step_stats.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

// The training windows a micro-batch draws (data/sampler.hpp): the sampler's step and the first of its
// sequences there.
struct Windows {
  std::int64_t sampler_step = 0;
  int first_sequence = 0;
};

template <class T> class UpdatePolicy {
 public:
  virtual ~UpdatePolicy() = default;

  // The windows micro-batch `microbatch` (as the lists number it) of step `step` trains on.
  virtual Windows windows(std::int64_t step, std::int64_t microbatch) const = 0;
  // dL/d(per-token loss) of the loss each update applies (a mean over its sequences).
  virtual T loss_scale() const = 0;
  // Where micro-batch `microbatch`'s loss sum goes among the step's train.microbatches slots, which the step's
  // loss adds in slot order.
  virtual int loss_slot(std::int64_t microbatch) const = 0;

  // Before the step's lists (a failed transfer names the step).
  virtual void begin_step(std::int64_t step) = 0;
  // Around the compute actions: before F, B or I (the weights they read) and after B or I (what the micro-batch
  // no longer needs).
  virtual void before_compute(const schedule::Action& action) = 0;
  virtual void after_backward(const schedule::Action& action) = 0;
  // The lists' own weight actions: U (an update), rs and ss (the ordered reduction's running sum).
  virtual void run(const schedule::Action& action) = 0;

  // After the step's lists. `sums` holds the step's report (its loss sums by slot, the stop votes), which the
  // trainer sums over the world in one allreduce: contribute() appends what the policy needs summed with them
  // and fills what it knows of the step already (asynchronous schedules: the lr of its last update, since the
  // report may complete after the next step's updates); finish() closes the step once the sum is in (the
  // replicas' gradients, norms, the optimizer) and fills stats.lr, grad_norm, skipped, optimizer_seconds.
  virtual void contribute(std::vector<double>& sums, StepStats& stats) const = 0;
  virtual void finish(std::int64_t step, const std::vector<double>& sums, StepStats& stats) = 0;
};

}  // namespace kpipe::runtime
