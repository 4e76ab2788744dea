#include "kpipe/runtime/versioned_updates.hpp"

#include <cmath>
#include <stdexcept>
#include <tuple>

#include "kpipe/core/error.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::runtime {

using schedule::Op;

template <class T, class A>
VersionedUpdates<T, A>::VersionedUpdates(StageModel<T, A>& stage, const RunPlan& plan)
    : StagePolicy<T, A>(stage, plan), rules_(AsyncRules::of(stage.config())) {
  std::vector<std::unique_ptr<WeightVersions<T, A>>> versions;
  for (int c = 0; c < stage.chunks(); ++c)
    versions.push_back(std::make_unique<WeightVersions<T, A>>(space_, stage.chunk(c)));
  stage.keep_versions(std::move(versions));
  std::vector<std::int64_t> elements;
  for (int c = 0; c < stage.chunks(); ++c) elements.push_back(stage.chunk(c).params().grads().extent(0));
  reduction_->reserve_update_sums(space_, elements, plan.schedule.sums != schedule::SumRoute::allreduce,
                                  schedule::holds_update_sum(plan.schedule, plan.replica));
  in_flight_.resize(stage.chunks());
  next_forward_.assign(stage.chunks(), 0);
  update_squares_.assign(stage.chunks(), 0.0);
}

template <class T, class A> VersionedUpdates<T, A>::~VersionedUpdates() = default;

template <class T, class A> ListRange VersionedUpdates<T, A>::step_range(std::int64_t step) const {
  const std::int64_t steps = stage_->config().train.steps;
  require(step < steps,
          "train.steps = {}: an asynchronous run cannot go past its last step (it drains the pipeline there)", steps);
  const auto source = schedule::step_source(int(plan_->steps.size()), plan_->template_step, int(steps - first_step_),
                                            int(step - first_step_));
  ListRange range;
  std::tie(range.begin, range.end) = plan_->steps.at(source.step);
  range.offset = resumed_;
  range.offset.steps = source.shift;
  range.step = source.step;
  return range;
}

template <class T, class A> bool VersionedUpdates<T, A>::steady_step(std::int64_t step) const {
  const std::int64_t steps = stage_->config().train.steps;
  if (steps < plan_->template_step + 2) return true;
  return step >= plan_->template_step && step + 1 < steps;
}

template <class T, class A> void VersionedUpdates<T, A>::begin_step(std::int64_t step) {
  step_ = step;
  std::fill(update_squares_.begin(), update_squares_.end(), 0.0);
}

template <class T, class A> void VersionedUpdates<T, A>::before_compute(const schedule::Action& a) {
  auto& versions = stage_->versions(a.chunk);
  versions.bind(a.version);
  if (a.op == Op::forward) {  // the version the rule gives it, stashed for its backward
    in_flight_[a.chunk][a.microbatch] = a.version;
    next_forward_[a.chunk] = a.microbatch + 1;
  } else if (schedule::is_backward(a.op)) {  // weight stashing: its forward's version
    this->versions_read_.push_back({a.microbatch, in_flight_[a.chunk].at(a.microbatch), a.version});
  }
}

template <class T, class A> void VersionedUpdates<T, A>::after_backward(const schedule::Action& a) {
  in_flight_[a.chunk].erase(a.microbatch);
  stage_->versions(a.chunk).release([&](int v) { return version_needed(a.chunk, v); });
}

template <class T, class A> void VersionedUpdates<T, A>::run(const schedule::Action& a) {
  if (a.op != Op::update) throw std::logic_error("VersionedUpdates: a reduction action in an asynchronous schedule");
  // From the newest version, with the weight gradients accumulated since the last update (summed over the
  // replicas); the result is the next version, written where it will live (weight_versions.hpp).
  auto& chunk = stage_->chunk(a.chunk);
  const std::int64_t update = rules_.update_of(a.microbatch);
  reduction_->before_update(space_, chunk.params().grads(), a, update);
  const View1<const T> newest =
      stage_->versions(a.chunk).advance(a.version, [&](int v) { return version_needed(a.chunk, v); });
  update_squares_[a.chunk] = apply_async_update(space_, stage_->config().optim, rules_, stage_->virtual_stage(a.chunk),
                                                update, chunk.params(), newest);
  lr_ = rules_.learning_rate(stage_->config().optim, update);
}

template <class T, class A> void VersionedUpdates<T, A>::contribute(StepReport& report, StepStats& stats) const {
  // Every stage's last update's squared norm; replica 0's (the replicas' updates are the same).
  double squares = 0;
  if (stage_->grid().replica == 0)
    for (double s : update_squares_) squares += s;
  report.update_squares = squares;
  stats.lr = lr_;
}

template <class T, class A>
void VersionedUpdates<T, A>::finish(std::int64_t, const StepReport& report, StepStats& stats) {
  stats.grad_norm = std::sqrt(report.update_squares);
}

template <class T, class A> bool VersionedUpdates<T, A>::version_needed(int c, int version) const {
  // A micro-batch in flight reads it, or a forward to come may: the next forward reads the rule's version,
  // later ones no older (the rule never goes back).
  for (const auto& entry : in_flight_[c])
    if (entry.second == version) return true;
  const auto& lists = plan_->lists();
  if (next_forward_[c] >= std::int64_t(stage_->config().train.steps) * lists.microbatches) return false;
  return version >= schedule::rule_version(lists.updates, lists.ranks, lists.microbatches, stage_->virtual_stage(c),
                                           int(next_forward_[c]), false);
}

template <class T, class A> bool VersionedUpdates<T, A>::runs_lists_from(std::int64_t step) const {
  return step < stage_->config().train.steps;  // none is left to plan after the last step
}

template <class T, class A>
void VersionedUpdates<T, A>::resume(std::int64_t step, const std::vector<std::vector<std::vector<T>>>& older) {
  const auto& lists = plan_->lists();
  first_step_ = step;
  resumed_ = {0, step * lists.microbatches, int(step) * schedule::versions_per_step(lists.updates, lists.microbatches)};
  for (int c = 0; c < stage_->chunks(); ++c) {
    // A drained run's checkpoint (no older versions): the newest stands for them all.
    const bool drained = older.empty() || older.at(c).empty();
    std::vector<T> newest;
    if (drained) {
      const auto& values = stage_->chunk(c).params().values();
      newest.resize(values.extent(0));
      Kokkos::deep_copy(Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(newest.data(), newest.size()),
                        values);
    }
    std::vector<std::pair<int, const T*>> held;
    for (int j = 1; j <= stage_->older_versions(c, step); ++j)
      if (drained || !older[c].at(j - 1).empty())
        held.push_back({resumed_.version - j, drained ? newest.data() : older[c][j - 1].data()});
    stage_->versions(c).restart(resumed_.version, held);
    in_flight_[c].clear();
    next_forward_[c] = resumed_.microbatch;
  }
}

#define KPIPE_INSTANTIATE(T, A) template class VersionedUpdates<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
