#include "kpipe/schedule/simulate.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {

namespace {

constexpr double not_yet = std::numeric_limits<double>::infinity();

void check_costs(const Costs& c) {
  const std::pair<const char*, double> all[] = {{"f", c.f},           {"b", c.b},
                                                {"i", c.i},           {"w", c.w},
                                                {"step", c.step},     {"latency", c.latency},
                                                {"per_byte", c.per_byte}, {"activation_bytes", c.activation_bytes}};
  for (const auto& [name, value] : all)
    require(value >= 0 && value < not_yet, "cost {} = {}: must be a non-negative number", name, value);
}

}  // namespace

double duration(Op op, const Costs& costs) {
  switch (op) {
    case Op::forward: return costs.f;
    case Op::backward: return costs.b;
    case Op::backward_input: return costs.i;
    case Op::backward_weight: return costs.w;
    case Op::step: return costs.step;
    default: return 0;
  }
}

SimResult simulate(const Schedule& schedule, const Costs& costs) {
  return simulate(schedule, std::vector<Costs>(std::size_t(std::max(schedule.ranks, 1)), costs));
}

SimResult simulate(const Schedule& schedule, const std::vector<Costs>& rank_costs) {
  const bool per_stage = rank_costs.size() == std::size_t(schedule.virtual_stages());
  if (!per_stage && rank_costs.size() != std::size_t(schedule.ranks))
    throw std::invalid_argument("simulate: one Costs per rank or per virtual stage expected");
  for (const auto& c : rank_costs) check_costs(c);
  const Costs& costs = rank_costs.front();
  validate(schedule);
  const Schedule s = lower(schedule);
  const int stages = s.virtual_stages(), last = stages - 1;
  const std::size_t n = std::size_t(s.microbatches) * stages;
  auto at = [&](int microbatch, int vstage) { return std::size_t(microbatch) * stages + vstage; };
  const double transfer = costs.latency + costs.activation_bytes * costs.per_byte;

  // When each input is available, per (micro-batch, consuming virtual stage); infinity until produced.
  std::vector<double> activation_ready(n, not_yet), gradient_ready(n, not_yet);
  std::vector<double> forward_end(n, not_yet), backward_end(n, not_yet);
  std::vector<double> rank_free(s.ranks, 0);
  std::vector<std::size_t> pc(s.ranks, 0);

  SimResult result;
  result.busy.assign(s.ranks, 0);
  result.timeline.resize(s.ranks);

  // The time the action's input is there (not_yet when not produced so far).
  auto input_time = [&](int r, const Action& a) {
    const int k = s.virtual_stage(r, a.chunk);
    switch (a.op) {
      case Op::recv_activation: return activation_ready[at(a.microbatch, k)];
      case Op::recv_gradient: return gradient_ready[at(a.microbatch, k)];
      case Op::forward:
        // From another rank the receive already waited; from this rank, the previous chunk's forward.
        return k > 0 && s.rank_of(k - 1) == r ? forward_end[at(a.microbatch, k - 1)] : 0.0;
      case Op::backward:
      case Op::backward_input:
        return k < last && s.rank_of(k + 1) == r ? backward_end[at(a.microbatch, k + 1)] : 0.0;
      default: return 0.0;
    }
  };

  // Validation guarantees that the loop ends: each sweep runs at least one action until all are done.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.ranks; ++r) {
      const auto& list = s.actions[r];
      for (; pc[r] < list.size(); ++pc[r]) {
        const Action& a = list[pc[r]];
        const double ready = input_time(r, a);
        if (ready == not_yet) break;
        const int k = s.virtual_stage(r, a.chunk);
        const double start = std::max(rank_free[r], ready);
        const double end = start + duration(a.op, rank_costs[per_stage ? k : r]);
        rank_free[r] = end;
        if (a.op == Op::forward) forward_end[at(a.microbatch, k)] = end;
        if (is_backward(a.op)) backward_end[at(a.microbatch, k)] = end;
        if (a.op == Op::send_activation) activation_ready[at(a.microbatch, k + 1)] = end + transfer;
        if (a.op == Op::send_gradient) gradient_ready[at(a.microbatch, k - 1)] = end + transfer;
        if (!is_comm(a.op)) {
          result.busy[r] += end - start;
          result.timeline[r].push_back(Span{a, start, end});
        }
        progress = true;
      }
    }
  }

  result.makespan = *std::max_element(rank_free.begin(), rank_free.end());
  result.idle_fraction.resize(s.ranks);
  for (int r = 0; r < s.ranks; ++r) {
    result.idle_fraction[r] = result.makespan > 0 ? 1.0 - result.busy[r] / result.makespan : 0.0;
    result.bubble += result.idle_fraction[r];
  }
  result.bubble /= s.ranks;
  result.peak_stash = peak_stash(s);
  return result;
}

}  // namespace kpipe::schedule
