#include "kpipe/runtime/async_rules.hpp"

#include <cmath>

#include "kpipe/core/error.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::runtime {

AsyncRules AsyncRules::of(const Config& config) {
  require(is_asynchronous(config.pipeline.schedule), "pipeline.schedule = \"{}\": not asynchronous",
          config.pipeline.schedule);
  AsyncRules r;
  r.updates = schedule::updates_of(config.pipeline.schedule, config.pipeline.vertical_sync == 1);
  r.microbatches = config.train.microbatches / config.pipeline.data_parallel;
  r.replicas = config.pipeline.data_parallel;
  r.sequences_per_microbatch = config.train.batch / config.train.microbatches;
  r.seq_len = config.model.seq_len;
  r.steps = config.train.steps;
  return r;
}

double AsyncRules::learning_rate(const OptimizerConfig& optim, std::int64_t update) const {
  if (!per_microbatch()) return nn::learning_rate(optim, update, steps);
  // The synchronous schedule at the fraction update / m of a step: the same curve in m times finer steps.
  OptimizerConfig finer = optim;
  finer.warmup_steps = optim.warmup_steps * microbatches;
  finer.decay_steps = optim.decay_steps * microbatches;
  return nn::learning_rate(finer, update, steps * microbatches);
}

double AsyncRules::loss_scale() const {
  const double sequences = double(sequences_per_microbatch) * replicas * (per_microbatch() ? 1 : microbatches);
  return 1.0 / (sequences * seq_len);
}

std::int64_t AsyncRules::sampler_step(std::int64_t microbatch) const {
  return per_microbatch() ? microbatch : microbatch / microbatches;
}

int AsyncRules::first_sequence(std::int64_t microbatch, int replica) const {
  const int index = per_microbatch() ? replica : replica * microbatches + int(microbatch % microbatches);
  return index * sequences_per_microbatch;
}

template <class T, class A>
double apply_async_update(const ExecSpace& space, const OptimizerConfig& optim, const AsyncRules& rules,
                          std::int64_t update, model::ParameterStore<T, A>& p) {
  double squares = 0;
  for (double s : layer_grad_squares(space, p)) squares += s;
  const double norm = std::sqrt(squares);
  if (std::isfinite(norm)) {
    const double lr = rules.learning_rate(optim, update), scale = nn::clip_factor(norm, optim.grad_clip);
    if (optim.kind == OptimizerKind::sgd)
      nn::sgd_update(space, optim, lr, scale, p.values(), p.grads(), p.moment1(), p.decay_mask());
    else
      nn::adamw_update(space, optim, lr, update + 1, scale, p.values(), p.grads(), p.moment1(), p.moment2(),
                       p.decay_mask());
  }
  p.zero_grads(space);
  p.refresh_compute_copy(space);
  return squares;
}

template double apply_async_update(const ExecSpace&, const OptimizerConfig&, const AsyncRules&, std::int64_t,
                                   model::ParameterStore<float>&);
template double apply_async_update(const ExecSpace&, const OptimizerConfig&, const AsyncRules&, std::int64_t,
                                   model::ParameterStore<double>&);
template double apply_async_update(const ExecSpace&, const OptimizerConfig&, const AsyncRules&, std::int64_t,
                                   model::ParameterStore<float, bf16>&);

}  // namespace kpipe::runtime
