#pragma once
// When a training loop (kpipe-train's, the tests') checks for silent data corruption, at its step boundaries:
// a recomputation (recompute_check.hpp) armed before every check.recompute_every-th step and judged after it;
// the replicas compared (replica_check.hpp) after every check.replicas_every-th step, the run's last and any
// a checkpoint follows (its snapshot compares them again, io/checkpoint.hpp, for callers without this loop).
// Every rank gets the same finding; the loop stops with ExitCode::replicas_disagree on one.
#include <cstdint>
#include <optional>

#include "kpipe/runtime/recompute_check.hpp"
#include "kpipe/runtime/replica_check.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

template <class T, class A> class CorruptionChecks {
 public:
  // The checks of stage.config().check on the stage (which outlives them).
  explicit CorruptionChecks(StageModel<T, A>& stage);

  // Whether observe() must see the trainer's compute actions (the recomputation is on).
  bool observes() const { return recompute_.has_value(); }
  void observe(const schedule::Action& action, int slot) {
    if (recompute_) recompute_->observe(action, slot);
  }

  // Before step `step` (0-based) runs.
  void before_step(std::int64_t step);
  // Collective over the world, after step `step` ran (an asynchronous step's updates are done by then; its
  // report need not be). `checkpoint_follows`: a checkpoint of this step is written next (compared whatever
  // the interval).
  std::optional<SilentCorruption> after_step(std::int64_t step, bool checkpoint_follows);

 private:
  StageModel<T, A>* stage_;
  std::optional<RecomputeCheck<T, A>> recompute_;
  bool recompute_armed_ = false;
};

}  // namespace kpipe::runtime
