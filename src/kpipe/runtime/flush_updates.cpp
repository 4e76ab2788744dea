#include "kpipe/runtime/flush_updates.hpp"

#include <cmath>
#include <stdexcept>

#include "kpipe/core/clock.hpp"
#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/runtime/peer_lost.hpp"

namespace kpipe::runtime {

template <class T, class A>
FlushUpdates<T, A>::FlushUpdates(StageModel<T, A>& stage, const RunPlan& plan) : stage_(&stage), plan_(&plan) {
  const double timeout = stage.config().pipeline.recv_timeout_s;
  reduction_ = std::make_unique<GradientReduction<T>>(
      stage.grid(), plan.run(), sum_transport(plan), timeout, [this, timeout](const schedule::Action& a) {
        peer_lost(stage_->grid(), {"step", step_, plan_->actions.size()}, a, stage_->chunks(), timeout);
      });
}

template <class T, class A> FlushUpdates<T, A>::~FlushUpdates() = default;

template <class T, class A> T FlushUpdates<T, A>::loss_scale() const {
  const auto& c = stage_->config();
  return T(1.0 / (double(c.train.batch) * c.model.seq_len));
}

template <class T, class A> void FlushUpdates<T, A>::run(const schedule::Action& a) {
  auto& chunk = stage_->chunk(a.chunk);
  switch (a.op) {
    case schedule::Op::recv_sum: reduction_->receive(space_, chunk.params().grads(), a); break;
    case schedule::Op::send_sum: reduction_->send(space_, chunk.params().grads(), a); break;  // after the W's queued so far
    default: throw std::logic_error("FlushUpdates: an update action in a synchronous schedule's lists");
  }
}

template <class T, class A> void FlushUpdates<T, A>::finish(std::int64_t step, const StepReport&, StepStats& stats) {
  std::vector<View1<T>> grads;
  for (int c = 0; c < stage_->chunks(); ++c) grads.push_back(stage_->chunk(c).params().grads());
  reduction_->finish(space_, grads, step);
  const double start = seconds_now();
  optimizer_step(step, stats);  // skips the update when the loss or the gradient is not finite
  space_.fence();
  stats.optimizer_seconds = seconds_now() - start;
}

template <class T, class A> void FlushUpdates<T, A>::optimizer_step(std::int64_t step, StepStats& stats) {
  const auto& config = stage_->config();
  // Global norm from per-layer sums placed by global layer index, so it is the same on every layout.
  std::vector<double> squares(stage_->desc().layers.size(), 0.0);
  for (int c = 0; c < stage_->chunks(); ++c) {
    const auto& params = stage_->chunk(c).params();
    const auto sums = params.layer_grad_squares(space_);
    for (std::size_t k = 0; k < sums.size(); ++k) squares[params.first_layer() + k] = sums[k];
  }
  comm::allreduce(squares, MPI_SUM, stage_->grid().pipeline,
                  {config.pipeline.recv_timeout_s, fmt::format("the gradient-norm allreduce of step {}", step)});
  double total = 0;
  for (double s : squares) total += s;
  stats.grad_norm = std::sqrt(total);
  stats.lr = nn::learning_rate(config.optim, step, config.train.steps);
  // Every rank sees the same loss and norm, so every rank skips alike.
  if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    for (int c = 0; c < stage_->chunks(); ++c) stage_->chunk(c).params().zero_grads(space_);
    return;
  }
  const double scale = nn::clip_factor(stats.grad_norm, config.optim.grad_clip);
  for (int c = 0; c < stage_->chunks(); ++c) {
    auto& p = stage_->chunk(c).params();
    // In place, the gradients zeroed as the update reads them: one pass over them instead of two.
    if (config.optim.kind == OptimizerKind::sgd)
      nn::sgd_update_into(space_, config.optim, stats.lr, scale, p.values(), p.values(), p.grads(), p.moment1(),
                          p.decay_mask());
    else
      nn::adamw_update_into(space_, config.optim, stats.lr, step + 1, scale, p.values(), p.values(), p.grads(),
                            p.moment1(), p.moment2(), p.decay_mask());
    p.refresh_compute_copy(space_);  // what the products read (mixed precision)
  }
}

#define KPIPE_INSTANTIATE(T, A) template class FlushUpdates<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
