#include "kpipe/runtime/async_rules.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kpipe/core/error.hpp"
#include "kpipe/core/precisions.hpp"
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
  r.stages = config.pipeline.pipeline_size;
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

int AsyncRules::delay(int stage, std::int64_t update) const {
  // The update's first micro-batch reads the oldest version among them (the rule never goes back).
  const std::int64_t first = per_microbatch() ? update : update * microbatches;
  return int(update - schedule::rule_version(updates, stages, microbatches, stage, int(first), false));
}

double AsyncRules::mean_delay(int stage, std::int64_t update) const {
  if (per_microbatch()) return delay(stage, update);
  std::int64_t stale = 0;
  for (std::int64_t k = update * microbatches; k < (update + 1) * microbatches; ++k)
    stale += update - schedule::rule_version(updates, stages, microbatches, stage, int(k), false);
  return double(stale) / microbatches;
}

double AsyncRules::lookahead(int stage, std::int64_t update) const {
  // 2bw: twice the mean delay, the strength the 600-step curves chose (docs/schedules.md, "A stable step under
  // delay"); on a quadratic it is also about the most stable for every share of stale micro-batches.
  return per_microbatch() ? delay(stage, update) : 2 * mean_delay(stage, update);
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
double apply_async_update(const ExecSpace& space, const OptimizerConfig& optim, const AsyncRules& rules, int stage,
                          std::int64_t update, model::ParameterStore<T, A>& p, nn::In1<T> from) {
  double squares = 0;
  for (double s : p.layer_grad_squares(space)) squares += s;
  const double norm = std::sqrt(squares);
  if (std::isfinite(norm)) {
    const double lr = rules.learning_rate(optim, update), scale = nn::clip_factor(norm, optim.grad_clip);
    const double lookahead = rules.lookahead(stage, update);
    // The update writes the compute copy the products read too (mixed precision): no refresh after it.
    if (optim.kind == OptimizerKind::sgd)
      nn::sgd_update_into(space, optim, lr, scale, from, p.values(), p.grads(), p.moment1(), p.decay_mask(), lookahead,
                          p.rounded_copy());
    else
      nn::adamw_update_into(space, optim, lr, update + 1, scale, from, p.values(), p.grads(), p.moment1(),
                            p.moment2(), p.decay_mask(), lookahead, p.rounded_copy());
  } else {
    if (from.data() != p.values().data()) {  // the version carried over unchanged, its compute copy with it
      Kokkos::deep_copy(space, p.values(), from);
      p.refresh_compute_copy(space);
    }
    p.zero_grads(space);
  }
  return squares;
}

// Also at float64: tests/runtime/test_async_rules.cpp holds the update to nn::adamw_update there.
#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template double apply_async_update(const ExecSpace&, const OptimizerConfig&, const AsyncRules&, int, std::int64_t,  \
                                     model::ParameterStore<T, A>&, nn::In1<T>);
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

int largest_delay(const PipelineConfig& pipeline) {
  if (pipeline.schedule == ScheduleKind::two_bw) return pipeline.pipeline_size > 1 ? 1 : 0;
  if (pipeline.schedule == ScheduleKind::pipedream) return pipeline.pipeline_size - 1;  // stage 0's, or everyone's
  return 0;
}

double delay_factor(int delay) { return std::sqrt(1.0 + delay); }

OptimizerConfig stable_schedule(const OptimizerConfig& synchronous, int delay) {
  OptimizerConfig stable = synchronous;
  const double factor = delay_factor(delay);
  stable.lr = synchronous.lr / factor;
  stable.warmup_steps = int(std::lround(synchronous.warmup_steps * factor));
  stable.min_lr = std::min(synchronous.min_lr, stable.lr);
  return stable;
}

namespace {

// 2bw's note: how many micro-batches of a step read the old weights, and what that cost where it was measured
// (the small preset, 600 steps, seed 4: benchmarks/convergence.py, docs/schedules.md "A stable step under
// delay"). Up to a quarter of them the cost is small; more is the regime the look-ahead does not fix.
std::string two_bw_note(const Config& config) {
  const AsyncRules rules = AsyncRules::of(config);
  const int m = rules.microbatches, stale = int(std::lround(rules.mean_delay(0, 1) * m));
  const std::string reads = fmt::format("pipeline.schedule = \"2bw\": {} of the {} micro-batches of each step read the "
                                        "weights one update old (the update looks ahead by {:.3g} for them)",
                                        stale, m, rules.lookahead(0, 1));
  if (4 * stale <= m)
    return reads + "; measured with 1 of 4: validation loss +0.4% against 1f1b's (small preset, 2 ranks, 600 steps) "
                   "for 1.13x its tokens/s (bench preset): docs/schedules.md";
  return reads + fmt::format("; more than a quarter trains worse: validation loss +5.1% against 1f1b's with 3 of 4, "
                             "-0.6% with 3 of 16 (small preset, 4 ranks, 600 steps): train.microbatches >= {} keeps "
                             "it to a quarter (docs/schedules.md)",
                             4 * stale * config.pipeline.data_parallel);
}

}  // namespace

OptimizerChoice choose_optimizer(const Config& config, const OptimizerConfig& preset,
                                 const std::vector<std::string>& given) {
  const auto is_given = [&](const char* key) { return std::find(given.begin(), given.end(), key) != given.end(); };
  OptimizerChoice choice{config.optim, {}};
  const int delay = largest_delay(config.pipeline);
  if (delay == 0) return choice;
  if (config.pipeline.schedule == ScheduleKind::two_bw) {
    // Its look-ahead makes up for its few stale micro-batches at the preset's lr (a smaller one trained worse:
    // docs/schedules.md): nothing to derive; the note says what the staleness costs.
    choice.note = two_bw_note(config);
    return choice;
  }
  const OptimizerConfig stable = stable_schedule(preset, delay);
  const std::string stale = fmt::format("pipeline.schedule = \"{}\" applies gradients {}{} update{} stale",
                                        config.pipeline.schedule, delay == 1 ? "" : "up to ", delay, delay == 1 ? "" : "s");
  if (is_given("optim.lr")) {
    if (config.optim.lr > stable.lr)
      choice.note = fmt::format("optim.lr = {} is above {:.3g}, the largest lr considered stable where {} (the preset's "
                                "{} / sqrt(1 + {})); kept as given",
                                config.optim.lr, stable.lr, stale, preset.lr, delay);
    return choice;
  }
  choice.optim.lr = stable.lr;
  if (!is_given("optim.min_lr")) choice.optim.min_lr = std::min(config.optim.min_lr, stable.lr);
  if (!is_given("optim.warmup_steps")) choice.optim.warmup_steps = stable.warmup_steps;
  choice.note = fmt::format("{}: optim.lr = {:.3g} (the preset's {} / sqrt(1 + {})), optim.warmup_steps = {}; "
                            "set optim.lr to choose another",
                            stale, choice.optim.lr, preset.lr, delay, choice.optim.warmup_steps);
  return choice;
}

}  // namespace kpipe::runtime
