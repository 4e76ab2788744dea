#include "kpipe/runtime/update_policy.hpp"

#include "kpipe/core/precisions.hpp"
#include "kpipe/runtime/flush_updates.hpp"
#include "kpipe/runtime/versioned_updates.hpp"

namespace kpipe::runtime {

template <class T, class A>
std::unique_ptr<UpdatePolicy<T>> make_update_policy(StageModel<T, A>& stage, const RunPlan& plan) {
  if (plan.asynchronous()) return std::make_unique<VersionedUpdates<T, A>>(stage, plan);
  return std::make_unique<FlushUpdates<T, A>>(stage, plan);
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template std::unique_ptr<UpdatePolicy<T>> make_update_policy(StageModel<T, A>&, const RunPlan&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
