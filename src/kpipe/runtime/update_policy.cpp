#include "kpipe/runtime/update_policy.hpp"

#include "kpipe/core/precisions.hpp"
#include "kpipe/runtime/flush_updates.hpp"
#include "kpipe/runtime/peer_lost.hpp"
#include "kpipe/runtime/versioned_updates.hpp"

namespace kpipe::runtime {

template <class T, class A>
StagePolicy<T, A>::StagePolicy(StageModel<T, A>& stage, const RunPlan& plan) : stage_(&stage), plan_(&plan) {
  const double timeout = stage.config().pipeline.recv_timeout_s;
  reduction_ = std::make_unique<GradientReduction<T>>(
      stage.grid(), plan.run(), sum_transport(plan), timeout, [this, timeout](const schedule::Action& a) {
        peer_lost(stage_->grid(), {"step", step_, plan_->actions.size()}, a, stage_->chunks(), timeout);
      });
}

template <class T, class A>
std::unique_ptr<UpdatePolicy<T>> make_update_policy(StageModel<T, A>& stage, const RunPlan& plan) {
  if (plan.lists().asynchronous()) return std::make_unique<VersionedUpdates<T, A>>(stage, plan);
  return std::make_unique<FlushUpdates<T, A>>(stage, plan);
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template class StagePolicy<T, A>;                                                                                   \
  template std::unique_ptr<UpdatePolicy<T>> make_update_policy(StageModel<T, A>&, const RunPlan&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
