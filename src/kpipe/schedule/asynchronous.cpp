#include "kpipe/schedule/asynchronous.hpp"

#include <algorithm>
#include <stdexcept>

#include "kpipe/core/error.hpp"

namespace kpipe::schedule {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

Updates updates_of(ScheduleKind schedule, bool vertical_sync) {
  if (schedule == ScheduleKind::pipedream) return vertical_sync ? Updates::vertical_sync : Updates::pipedream;
  if (schedule == ScheduleKind::two_bw) return Updates::two_bw;
  return Updates::flush;
}

int versions_bound(Updates updates, int ranks, int vstage) {
  switch (updates) {
    case Updates::pipedream: return ranks - vstage;
    case Updates::vertical_sync: return ranks;
    case Updates::two_bw: return ranks > 1 ? 2 : 1;  // one stage reads no old version
    case Updates::flush: return 1;
  }
  return 1;
}

int versions_per_step(Updates updates, int microbatches) {
  return updates == Updates::two_bw ? 1 : updates == Updates::flush ? 0 : microbatches;
}

std::vector<int> stash_bound(int ranks, int microbatches, std::int64_t run_steps) {
  std::vector<int> bound;
  for (int s = 0; s < ranks; ++s)
    bound.push_back(int(std::min<std::int64_t>(ranks - s, run_steps * microbatches)));
  return bound;
}

int rule_version(Updates updates, int ranks, int microbatches, int vstage, int k, bool resumed) {
  // The rule of a run from step 0, with the lists' newest version as 0; below 0 only for micro-batches in
  // flight when a resumed run's lists begin, which read the versions the checkpoint kept.
  int version = 0;
  switch (updates) {
    case Updates::pipedream: version = k - (ranks - 1 - vstage); break;
    case Updates::vertical_sync: version = k - (ranks - 1); break;
    case Updates::two_bw: version = k / microbatches - (k % microbatches < ranks - 1 ? 1 : 0); break;
    case Updates::flush: return 0;
  }
  const int oldest = resumed ? 1 - versions_bound(updates, ranks, vstage) : 0;
  return std::max(version, oldest);
}

Schedule asynchronous(Updates updates, int ranks, int microbatches, const AsyncOptions& o) {
  require(updates != Updates::flush, "asynchronous(): a synchronous update rule");
  require(ranks >= 1, "pipeline.pipeline_size = {}: need at least one stage", ranks);
  require(microbatches >= 1, "train.microbatches = {}: need at least one micro-batch", microbatches);
  require(o.steps >= 1, "train.steps = {}: need at least one step", o.steps);
  require(updates != Updates::two_bw || microbatches >= ranks,
          "train.microbatches = {} per pipeline is below pipeline.pipeline_size = {}: 2bw needs at least as many "
          "micro-batches per step as stages (two weight versions hold only then)",
          microbatches, ranks);
  Schedule s;
  s.ranks = ranks;
  s.microbatches = microbatches;
  s.chunks = 1;
  s.updates = updates;
  s.steps = o.steps;
  s.actions.resize(ranks);
  const int total = o.steps * microbatches;
  for (int r = 0; r < ranks; ++r) {
    if (o.resumed) s.versions_at_start.push_back(versions_bound(updates, ranks, r));
    auto& list = s.actions[r];
    auto version = [&](int k) { return rule_version(updates, ranks, microbatches, r, k, o.resumed); };
    auto compute = [&](Op op, int k) { return Action{op, k, 0, -1, version(k)}; };
    const int warmup = std::min(ranks - 1 - r, total);
    for (int k = 0; k < warmup; ++k) list.push_back(compute(Op::forward, k));
    for (int k = 0; k < total; ++k) {
      if (k + warmup < total) list.push_back(compute(Op::forward, k + warmup));
      list.push_back(compute(Op::backward, k));
      const bool window_end = (k + 1) % microbatches == 0;
      if (updates != Updates::two_bw)
        list.push_back(Action{Op::update, k, 0, -1, k + 1});
      else if (window_end)
        list.push_back(Action{Op::update, k, 0, -1, (k + 1) / microbatches});
      if (window_end) list.push_back(Action{Op::step, 0, 0, -1, 0});
    }
  }
  return s;
}

int Horizon::template_step() const {
  // Past the rule's max(0, ...): pipedream's reaches micro-batch p-2, 2BW's window 1.
  return std::max(2, ceil_div(ranks - 1, microbatches));
}

int Horizon::steps() const {
  // A micro-batch forwarded in a step is read again up to ceil((p-1)/m) steps later (its backward on stage
  // 0; vertical sync's old versions): that many steps follow the template before the last step.
  return template_step() + ceil_div(ranks - 1, microbatches) + 2;
}

StepSource step_source(int horizon_steps, int template_step, int run_steps, int index) {
  if (index < 0 || index >= run_steps) throw std::out_of_range("step_source: step outside the run");
  if (run_steps <= horizon_steps) return {index, 0};
  const int tail = horizon_steps - 1 - template_step;  // the steps after the template, the last included
  const int shift = run_steps - horizon_steps;
  if (index < template_step) return {index, 0};
  if (index >= run_steps - tail) return {index - shift, shift};
  return {template_step, index - template_step};
}

Action shifted(const Action& a, const Schedule& s, int steps, int groups_per_step) {
  if (steps == 0 || a.op == Op::step) return a;
  Action b = a;
  if (is_reduction(a.op)) {
    b.microbatch += steps * groups_per_step;
    return b;
  }
  b.microbatch += steps * s.microbatches;
  if (is_compute(a.op) || a.op == Op::update) b.version += steps * versions_per_step(s.updates, s.microbatches);
  return b;
}

std::vector<std::pair<std::size_t, std::size_t>> step_ranges(const std::vector<Action>& list) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].op == Op::step) {
      ranges.push_back({begin, i + 1});
      begin = i + 1;
    }
  if (begin < list.size()) ranges.push_back({begin, list.size()});
  return ranges;
}

}  // namespace kpipe::schedule
