#pragma once
// Asynchronous schedules' updates (PipeDream, its vertical sync, PipeDream-2BW; schedule/asynchronous.hpp):
// every F, B and I reads the weight version its action names, bound from the chunk's pool (the layers read
// its buffers; weight stashing: a backward reads its forward's version), and the lists' update actions U
// apply the gradients accumulated since the last update (summed over the replicas first) to the newest
// version, producing the next. A version goes back to the pool once no micro-batch in flight or to come reads
// it. What an update means for the optimizer and the data is async_rules.hpp's.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kpipe/runtime/async_rules.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/update_policy.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class VersionedUpdates final : public StagePolicy<T, A> {
 public:
  // Makes each chunk's weight versions (the stage model keeps them, where checkpoints read them).
  VersionedUpdates(StageModel<T, A>& stage, const RunPlan& plan);
  ~VersionedUpdates() override;

  // A step is one step of the validated lists (step_range: the one step_source() names, shifted to the step;
  // a run cannot go past its last step, which drains the pipeline); its report completes after the next step's
  // lists.
  ListRange step_range(std::int64_t step) const override;
  // Past the warm-up, before the last step's drain, when the run has such steps.
  bool steady_step(std::int64_t step) const override;
  bool report_completes_in_step() const override { return false; }

  Windows windows(std::int64_t, std::int64_t microbatch) const override {  // as async_rules.hpp says
    return {rules_.sampler_step(microbatch), rules_.first_sequence(microbatch, stage_->grid().replica)};
  }
  T loss_scale() const override { return T(rules_.loss_scale()); }
  int loss_slot(std::int64_t microbatch) const override { return rules_.loss_index(microbatch, stage_->grid().replica); }
  void begin_step(std::int64_t step) override;
  void before_compute(const schedule::Action& action) override;
  void after_backward(const schedule::Action& action) override;
  void run(const schedule::Action& action) override;
  void contribute(StepReport& report, StepStats& stats) const override;
  void finish(std::int64_t step, const StepReport& report, StepStats& stats) override;

  // A resumed run continues with the validated lists that forward its micro-batches in flight again on their
  // versions (the plan holds them, planned from the resume's step), numbered from the resume; the parameters are
  // the newest version.
  bool runs_lists_from(std::int64_t step) const override;
  void resume(std::int64_t step, const std::vector<std::vector<std::vector<T>>>& older) override;
  const AsyncRules& rules() const { return rules_; }

 private:
  bool version_needed(int chunk, int version) const;  // a micro-batch in flight or to come reads it

  using StagePolicy<T, A>::stage_;
  using StagePolicy<T, A>::plan_;
  using StagePolicy<T, A>::reduction_;
  using StagePolicy<T, A>::step_;
  using StagePolicy<T, A>::space_;
  AsyncRules rules_;
  std::vector<std::map<std::int64_t, int>> in_flight_;  // per chunk: micro-batch -> the version its forward read
  std::vector<std::int64_t> next_forward_;               // per chunk: the next micro-batch to forward
  std::vector<double> update_squares_;                  // per chunk: its last update's squared gradient norm
  double lr_ = 0;                                       // the last update's
  // A resumed run: its first step, and what its lists' micro-batches and versions are offset by to be the run's.
  std::int64_t first_step_ = 0;
  Offset resumed_;
};

}  // namespace kpipe::runtime
