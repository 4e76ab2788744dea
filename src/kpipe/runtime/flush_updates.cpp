#include "kpipe/runtime/flush_updates.hpp"

#include <cmath>
#include <stdexcept>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/fence.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/core/step_number.hpp"
#include "kpipe/nn/optimizer.hpp"

namespace kpipe::runtime {

template <class T, class A>
FlushUpdates<T, A>::FlushUpdates(StageModel<T, A>& stage, const RunPlan& plan) : StagePolicy<T, A>(stage, plan) {}

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
  // Timed on the stream, not by a fence and the wall clock: the host goes on to queue the next step while the
  // update runs. The previous update's events are done by now (the stream has run this step's actions since).
  const double previous = update_timed_ ? elapsed_seconds(update_began_, update_ended_) : 0.0;
  update_began_.record(space_);
  optimizer_step(step, stats);  // skips the update when the loss or the gradient is not finite
  update_ended_.record(space_);
  update_timed_ = true;
  // Host backends: done already (there an event is a fence); on a device, most likely still running: the
  // report carries the latest update the stream has finished, this one or the one before.
  stats.optimizer_seconds = update_ended_.done() ? elapsed_seconds(update_began_, update_ended_) : previous;
}

template <class T, class A> void FlushUpdates<T, A>::optimizer_step(std::int64_t step, StepStats& stats) {
  const auto& config = stage_->config();
  // Global norm from per-layer sums placed by global layer index, so it is the same on every layout.
  // Every chunk's sums queued, then one wait.
  std::vector<double> squares(stage_->desc().layers.size(), 0.0);
  for (int c = 0; c < stage_->chunks(); ++c) {
    const auto& params = stage_->chunk(c).params();
    params.queue_layer_grad_squares(space_, squares.data() + params.first_layer());
  }
  named_fence(space_, "kpipe::runtime::FlushUpdates::optimizer_step: the host reads the gradient norm's sums");
  comm::allreduce(squares, MPI_SUM, stage_->grid().pipeline,
                  {config.pipeline.recv_timeout_s, fmt::format("the gradient-norm allreduce of step {}", step_number(step)),
                   stage_->grid().nodes});
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
    // In place, the gradients zeroed as the update reads them and the compute copy the products read written
    // as the new weights are (mixed precision): one pass instead of three.
    if (config.optim.kind == OptimizerKind::sgd)
      nn::sgd_update_into(space_, config.optim, stats.lr, scale, p.values(), p.values(), p.grads(), p.moment1(),
                          p.decay_mask(), 0, p.rounded_copy());
    else
      nn::adamw_update_into(space_, config.optim, stats.lr, step + 1, scale, p.values(), p.values(), p.grads(),
                            p.moment1(), p.moment2(), p.decay_mask(), 0, p.rounded_copy());
  }
}

#define KPIPE_INSTANTIATE(T, A) template class FlushUpdates<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
