#include "kpipe/schedule/simulate.hpp"

#include <algorithm>
#include <stdexcept>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/bubble.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"
#include "kpipe/schedule/versions.hpp"

namespace kpipe::schedule {

namespace {

std::vector<Costs> per_stage(const Schedule& s, const std::vector<Costs>& costs) {
  std::vector<Costs> stages;
  if (costs.size() == std::size_t(s.virtual_stages())) {
    stages = costs;
  } else {
    if (costs.size() != std::size_t(s.ranks))
      throw std::invalid_argument("simulate: one Costs per rank or per virtual stage expected");
    for (int k = 0; k < s.virtual_stages(); ++k) stages.push_back(costs[s.rank_of(k)]);
  }
  for (const auto& c : stages) check_costs(c);
  return stages;
}

// The steady state: asynchronous lists from their template step to the one before the last (a shorter run:
// its middle steps, or all of it); synchronous ones, the step.
void steady_state(const Schedule& s, SimResult& result) {
  const int world = int(result.busy.size());
  result.steady_first = 0;
  result.steady_last = s.steps - 1;
  if (s.asynchronous() && s.steps >= 3) {
    result.steady_first = std::min(Horizon{s.ranks, s.microbatches}.template_step(), s.steps - 2);
    result.steady_last = s.steps - 2;
  }
  result.steady_idle_fraction.assign(world, 0.0);
  for (int w = 0; w < world; ++w) {
    const auto& ends = result.step_ends[w];
    if (!s.asynchronous() || int(ends.size()) != s.steps) {
      result.steady_idle_fraction[w] = result.idle_fraction[w];
      continue;
    }
    const double from = result.steady_first > 0 ? ends[result.steady_first - 1] : 0.0, to = ends[result.steady_last];
    double busy = 0;
    for (const Span& span : result.timeline[w]) busy += std::max(0.0, std::min(span.end, to) - std::max(span.start, from));
    result.steady_idle_fraction[w] = to > from ? 1.0 - busy / (to - from) : 0.0;
  }
  for (double f : result.steady_idle_fraction) result.steady_bubble += f / world;
  result.steady_step = result.makespan;
  if (const auto& ends = result.step_ends.front(); s.asynchronous() && int(ends.size()) == s.steps) {
    const double from = result.steady_first > 0 ? ends[result.steady_first - 1] : 0.0;
    result.steady_step = (ends[result.steady_last] - from) / double(result.steady_last - result.steady_first + 1);
  }
}

// The figures of a timed run of `lowered`'s replicas.
SimResult figures(const std::vector<Schedule>& lowered, Interpretation run) {
  SimResult result;
  const int world = int(run.busy.size());
  result.busy = std::move(run.busy);
  result.timeline = std::move(run.timeline);
  result.step_ends = std::move(run.step_ends);
  result.makespan = *std::max_element(run.free_at.begin(), run.free_at.end());
  std::vector<RankTime> times(world);
  for (int w = 0; w < world; ++w) times[w] = {result.busy[w], run.free_at[w]};
  result.idle_fraction = idle_fractions(times);
  result.bubble = mean_bubble(result.idle_fraction);
  for (const auto& replica : lowered) {
    const auto peaks = peak_stash(replica);
    result.peak_stash.insert(result.peak_stash.end(), peaks.begin(), peaks.end());
    const auto versions = versions_held(replica);
    result.versions_held.insert(result.versions_held.end(), versions.begin(), versions.end());
  }
  steady_state(lowered.front(), result);
  return result;
}

// A timed run of lists the validator accepted must finish: a failure here is a bug.
Interpretation finished(Interpretation run) {
  if (!run.finished()) throw std::logic_error("simulate: a validated schedule did not run through: " + run.failure());
  return run;
}

}  // namespace

SimResult simulate(const Schedule& schedule, const Costs& costs) {
  return simulate(schedule, std::vector<Costs>(std::size_t(std::max(schedule.ranks, 1)), costs));
}

SimResult simulate(const Schedule& schedule, const std::vector<Costs>& costs) {
  per_stage(schedule, costs);  // the costs' shape first, as the plan's own check would find it later
  for (const auto& list : schedule.actions)
    for (const Action& a : list)
      require(!is_reduction(a.op), "schedule: {} belongs to data-parallel replicas: plan them together",
              to_token(a, schedule.chunks));
  return simulate(plan(schedule, "given", Replication{}, Delivery::buffered), costs);
}

SimResult simulate(const Plan& plan, const std::vector<Costs>& costs) {
  const auto stage_costs = per_stage(plan.run.replicas.front(), costs);
  return figures(plan.run.replicas, finished(interpret(plan.run, Mode::timed(stage_costs))));
}

}  // namespace kpipe::schedule
