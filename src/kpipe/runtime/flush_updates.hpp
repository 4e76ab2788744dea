#pragma once
// Synchronous schedules' updates (the flush): every micro-batch's weight gradients accumulate through the
// step's lists in micro-batch order, the replicas' sums meet (in the lists, as the ordered reduction's running
// sum, or by allreduce after them), and one optimizer step follows: the global gradient norm from per-layer
// sums placed by global layer index (the same on every layout), a step skipped on every rank alike when the
// loss or the norm is not finite, clipping, AdamW or SGD.
#include <memory>

#include "kpipe/core/stream_event.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/update_policy.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class FlushUpdates final : public StagePolicy<T, A> {
 public:
  FlushUpdates(StageModel<T, A>& stage, const RunPlan& plan);
  ~FlushUpdates() override;

  // Every step runs the whole list and completes its report (the optimizer step needs the loss); its lists are
  // every step's, so a resume changes nothing here.
  ListRange step_range(std::int64_t) const override { return {0, plan_->actions.size(), {}}; }
  bool steady_step(std::int64_t) const override { return true; }
  bool report_completes_in_step() const override { return true; }
  bool runs_lists_from(std::int64_t) const override { return false; }
  void resume(std::int64_t, const std::vector<std::vector<std::vector<T>>>&) override {}

  Windows windows(std::int64_t step, std::int64_t microbatch) const override {
    return {step, plan_->global_microbatch(int(microbatch)) * plan_->sequences_per_microbatch};
  }
  T loss_scale() const override;
  int loss_slot(std::int64_t microbatch) const override { return plan_->global_microbatch(int(microbatch)); }
  void begin_step(std::int64_t step) override { this->step_ = step; }
  void before_compute(const schedule::Action&) override {}
  void after_backward(const schedule::Action&) override {}
  void run(const schedule::Action& action) override;
  void contribute(StepReport&, StepStats&) const override {}
  void finish(std::int64_t step, const StepReport& report, StepStats& stats) override;

 private:
  void optimizer_step(std::int64_t step, StepStats& stats);

  using StagePolicy<T, A>::stage_;
  using StagePolicy<T, A>::plan_;
  using StagePolicy<T, A>::reduction_;
  using StagePolicy<T, A>::space_;
  StreamEvent update_began_{/*timing=*/true}, update_ended_{/*timing=*/true};  // the last optimizer step's span
  bool update_timed_ = false;
};

}  // namespace kpipe::runtime
