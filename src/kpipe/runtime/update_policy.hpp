#pragma once
// How a run's weights change, and with it everything in which synchronous and asynchronous schedules differ at
// run time: the step's part of the list, when the step's report completes, resuming, the versions the actions
// read (what a run of the lists stages, holds and repeats is schedule/run_steps.hpp's, one answer for both
// kinds). FlushUpdates (flush_updates.hpp): the micro-batches' gradients accumulate through the step's list and
// one optimizer step follows them, after the replicas' sum. VersionedUpdates (versioned_updates.hpp): every
// action reads the weight version the schedule names, the lists' update actions U produce new versions, and a
// step is one step of lists that run on without a flush. The executor calls the policy at the actions that
// touch weights; the trainer asks it what each step runs and lets it close the step.
#include <cstdint>
#include <memory>
#include <vector>

#include "kpipe/runtime/gradient_reduction.hpp"
#include "kpipe/runtime/program.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_report.hpp"
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

  // What a step runs: step `step`'s part of the list. A bad step throws InputError.
  virtual ListRange step_range(std::int64_t step) const = 0;
  // Whether step `step` is one of the run's steady state, for the figures compared with the simulator's.
  virtual bool steady_step(std::int64_t step) const = 0;

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

  // After the step's lists. The report (step_report.hpp) is summed over the world: contribute() fills what the
  // policy adds to it and what it knows of the step already (asynchronous schedules: the lr of its last
  // update). Whether the sum completes within the step: a flush's optimizer step needs the loss; otherwise
  // it completes after the next step's lists, and no rank waits at the step boundary. finish() closes the
  // step once the sum is in (the replicas' gradients, norms, the optimizer) and fills stats.lr, grad_norm,
  // skipped, optimizer_seconds.
  virtual void contribute(StepReport& report, StepStats& stats) const = 0;
  virtual bool report_completes_in_step() const = 0;
  virtual void finish(std::int64_t step, const StepReport& report, StepStats& stats) = 0;

  // Resuming at step boundary `step`, the newest weights and the optimizer state loaded. Whether a run resumed
  // there runs lists planned from that step (the trainer planned them at construction, for its first step);
  // older[c][j - 1]: version j updates before the newest on chunk c, for the micro-batches in flight (empty: a
  // drained run's checkpoint).
  virtual bool runs_lists_from(std::int64_t step) const = 0;
  virtual void resume(std::int64_t step, const std::vector<std::vector<std::vector<T>>>& older) = 0;

  // Per micro-batch run here, the versions its forward and backward read (none where every action reads the
  // newest weights).
  const std::vector<VersionsRead>& versions_read() const { return versions_read_; }

 protected:
  std::vector<VersionsRead> versions_read_;
};

// What both policies share: the stage model whose weights they change and the plan (both outlive it), the replicas'
// gradient reduction (a sum that does not arrive within pipeline.recv_timeout_s ends the job, naming the step
// under way), and that step.
template <class T, class A> class StagePolicy : public UpdatePolicy<T> {
 protected:
  StagePolicy(StageModel<T, A>& stage, const RunPlan& plan);

  StageModel<T, A>* stage_;
  const RunPlan* plan_;
  std::unique_ptr<GradientReduction<T>> reduction_;
  std::int64_t step_ = 0;
  ExecSpace space_;
};

// The policy of `plan`'s schedule, on `stage`'s weights (both outlive it).
template <class T, class A>
std::unique_ptr<UpdatePolicy<T>> make_update_policy(StageModel<T, A>& stage, const RunPlan& plan);

}  // namespace kpipe::runtime
