#include "kpipe/runtime/corruption_checks.hpp"

#include <fmt/format.h>

#include "kpipe/core/precisions.hpp"
#include "kpipe/core/step_number.hpp"

namespace kpipe::runtime {

template <class T, class A> CorruptionChecks<T, A>::CorruptionChecks(StageModel<T, A>& stage) : stage_(&stage) {
  if (stage.config().check.recompute_every > 0) recompute_.emplace(stage);
}

template <class T, class A> void CorruptionChecks<T, A>::before_step(std::int64_t step) {
  recompute_armed_ = recompute_ && step_number(step) % stage_->config().check.recompute_every == 0;
  if (recompute_armed_) recompute_->arm(step);
}

template <class T, class A>
std::optional<SilentCorruption> CorruptionChecks<T, A>::after_step(std::int64_t step, bool checkpoint_follows) {
  if (recompute_armed_) {
    recompute_armed_ = false;
    if (auto corruption = recompute_->verdict()) return corruption;
  }
  const auto& config = stage_->config();
  const int every = config.check.replicas_every;
  const std::int64_t number = step_number(step);
  const bool due = checkpoint_follows || (every > 0 && (number % every == 0 || number == config.train.steps));
  if (stage_->grid().data_parallel == 1 || !due) return std::nullopt;
  return check_replicas(*stage_, fmt::format("after step {}", number)).corruption;
}

#define KPIPE_INSTANTIATE(T, A) template class CorruptionChecks<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
