#include "kpipe/runtime/update_policy.hpp"

#include "kpipe/runtime/flush_updates.hpp"
#include "kpipe/runtime/versioned_updates.hpp"

namespace kpipe::runtime {

template <class T, class A>
std::unique_ptr<UpdatePolicy<T>> make_update_policy(StageModel<T, A>& stage, const RunPlan& plan) {
  if (plan.asynchronous()) return std::make_unique<VersionedUpdates<T, A>>(stage, plan);
  return std::make_unique<FlushUpdates<T, A>>(stage, plan);
}

template std::unique_ptr<UpdatePolicy<float>> make_update_policy(StageModel<float>&, const RunPlan&);
template std::unique_ptr<UpdatePolicy<double>> make_update_policy(StageModel<double>&, const RunPlan&);
template std::unique_ptr<UpdatePolicy<float>> make_update_policy(StageModel<float, bf16>&, const RunPlan&);

}  // namespace kpipe::runtime
