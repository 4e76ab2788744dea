#include "kpipe/schedule/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {

namespace {

constexpr double not_yet = std::numeric_limits<double>::infinity();

void check_costs(const Costs& c) {
  const std::pair<const char*, double> all[] = {
      {"f", c.f},         {"b", c.b},         {"i", c.i},           {"w", c.w},
      {"r", c.r},         {"step", c.step},   {"latency", c.latency}, {"per_byte", c.per_byte},
      {"activation_bytes", c.activation_bytes}, {"gradient_bytes", c.gradient_bytes}};
  for (const auto& [name, value] : all)
    require(value >= 0 && value < not_yet, "cost {} = {}: must be a non-negative number", name, value);
}

std::vector<Costs> per_stage(const Schedule& s, const std::vector<Costs>& costs) {
  if (costs.size() == std::size_t(s.virtual_stages())) return costs;
  if (costs.size() != std::size_t(s.ranks))
    throw std::invalid_argument("simulate: one Costs per rank or per virtual stage expected");
  std::vector<Costs> stages(s.virtual_stages());
  for (int k = 0; k < s.virtual_stages(); ++k) stages[k] = costs[s.rank_of(k)];
  return stages;
}

int log2_ceil(int n) {
  int steps = 0;
  while ((1 << steps) < n) ++steps;
  return steps;
}

}  // namespace

double duration(Op op, const Costs& costs) {
  switch (op) {
    case Op::forward: return costs.f;
    case Op::backward: return costs.b + costs.r;
    case Op::backward_input: return costs.i + costs.r;
    case Op::backward_weight: return costs.w;
    case Op::step: return costs.step;
    default: return 0;
  }
}

namespace detail {

WorldRun run_world(const std::vector<Schedule>& replicas, bool ordered, const std::vector<Costs>& stage_costs) {
  const Schedule& s = replicas.front();
  const int d = int(replicas.size()), p = s.ranks, stages = s.virtual_stages(), last = stages - 1;
  const int world = d * p;
  const std::size_t n = std::size_t(s.microbatches) * stages;
  auto at = [&](int replica, int microbatch, int vstage) {
    return std::size_t(replica) * n + std::size_t(microbatch) * stages + vstage;
  };
  const Costs& costs = stage_costs.front();
  const double transfer = costs.latency + costs.activation_bytes * costs.per_byte;
  auto sum_transfer = [&](int vstage) { return costs.latency + stage_costs[vstage].gradient_bytes * costs.per_byte; };

  // When each input is available, per (replica, micro-batch, consuming virtual stage); infinity until produced.
  std::vector<double> activation_ready(d * n, not_yet), gradient_ready(d * n, not_yet);
  std::vector<double> forward_end(d * n, not_yet), backward_end(d * n, not_yet);
  // The running sum, per (virtual stage, group): when it arrives at the group's holder, and when it was received.
  int groups = 1;
  for (const auto& replica : replicas)
    for (const auto& list : replica.actions)
      for (const Action& a : list)
        if (is_reduction(a.op)) groups = std::max(groups, a.microbatch + 1);
  std::vector<double> sum_ready(std::size_t(stages) * groups, not_yet), sum_received(std::size_t(stages) * groups, not_yet);
  std::vector<std::vector<int>> last_sent(world, std::vector<int>(s.chunks, -1));  // group of the latest sum sent
  std::vector<double> rank_free(world, 0), at_step(world, not_yet);
  std::vector<std::size_t> pc(world, 0);
  auto list_of = [&](int w) -> const std::vector<Action>& { return replicas[w / p].actions[w % p]; };

  WorldRun run;
  SimResult& result = run.result;
  result.busy.assign(world, 0);
  result.timeline.resize(world);

  // The final reduction before a stage's optimizer step: broadcast of the last sum, or an allreduce.
  auto reduction_time = [&](int rank) {
    if (d == 1) return 0.0;
    double t = 0;
    for (int c = 0; c < s.chunks; ++c)
      t += (ordered ? 1 : 2) * log2_ceil(d) * sum_transfer(s.virtual_stage(rank, c));
    return t;
  };
  // When the action's input is there (not_yet when not produced so far), and what it waits for.
  auto input_time = [&](int w, const Action& a, std::string* why) -> double {
    const int replica = w / p, r = w % p, k = s.virtual_stage(r, a.chunk);
    auto wait = [&](double t, const std::string& what) {
      if (t == not_yet && why) *why = what;
      return t;
    };
    switch (a.op) {
      case Op::recv_activation:
        return wait(activation_ready[at(replica, a.microbatch, k)],
                    fmt::format("the activation of micro-batch {} from rank {}", a.microbatch, a.peer));
      case Op::recv_gradient:
        return wait(gradient_ready[at(replica, a.microbatch, k)],
                    fmt::format("the gradient of micro-batch {} from rank {}", a.microbatch, a.peer));
      case Op::forward:
        // From another rank the receive already waited; from this rank, the previous chunk's forward.
        return k > 0 && s.rank_of(k - 1) == r
                   ? wait(forward_end[at(replica, a.microbatch, k - 1)],
                          fmt::format("the forward of micro-batch {} on chunk {}", a.microbatch, s.chunk_of(k - 1)))
                   : 0.0;
      case Op::backward:
      case Op::backward_input:
        return k < last && s.rank_of(k + 1) == r
                   ? wait(backward_end[at(replica, a.microbatch, k + 1)],
                          fmt::format("the backward of micro-batch {} on chunk {}", a.microbatch, s.chunk_of(k + 1)))
                   : 0.0;
      case Op::recv_sum: {
        const int group = a.microbatch;
        double t = wait(sum_ready[std::size_t(k) * groups + group],
                        fmt::format("the gradient sum for group {} from replica {}", group, a.peer));
        // The runtime receives into the buffer its previous send read: that one must have been received.
        if (const int sent = last_sent[w][a.chunk]; sent >= 0)
          t = std::max(t, wait(sum_received[std::size_t(k) * groups + sent],
                               fmt::format("the receipt of the gradient sum for group {} it sent", sent)));
        return t;
      }
      case Op::step: {
        // Every replica of this stage has reached its step (when each did is kept: it may have run it since).
        double t = 0;
        for (int other = 0; other < d; ++other) {
          const int v = other * p + r;
          if (at_step[v] == not_yet) {
            if (pc[v] + 1 != list_of(v).size())
              return wait(not_yet, fmt::format("replica {} of rank {} to finish its list", other, r));
            at_step[v] = rank_free[v];
          }
          t = std::max(t, at_step[v]);
        }
        return t + reduction_time(r);
      }
      default: return 0.0;
    }
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int w = 0; w < world; ++w) {
      const int replica = w / p, r = w % p;
      const auto& list = list_of(w);
      for (; pc[w] < list.size(); ++pc[w]) {
        const Action& a = list[pc[w]];
        const double ready = input_time(w, a, nullptr);
        if (ready == not_yet) break;
        const int k = s.virtual_stage(r, a.chunk);
        const double start = std::max(rank_free[w], ready);
        const double end = start + duration(a.op, stage_costs[k]);
        rank_free[w] = end;
        if (a.op == Op::forward) forward_end[at(replica, a.microbatch, k)] = end;
        if (is_backward(a.op)) backward_end[at(replica, a.microbatch, k)] = end;
        if (a.op == Op::send_activation) activation_ready[at(replica, a.microbatch, k + 1)] = end + transfer;
        if (a.op == Op::send_gradient) gradient_ready[at(replica, a.microbatch, k - 1)] = end + transfer;
        if (a.op == Op::send_sum) {
          sum_ready[std::size_t(k) * groups + a.microbatch] = end + sum_transfer(k);
          last_sent[w][a.chunk] = a.microbatch;
        }
        if (a.op == Op::recv_sum) sum_received[std::size_t(k) * groups + a.microbatch] = end;
        if (is_compute(a.op) || a.op == Op::step) {
          result.busy[w] += end - start;
          result.timeline[w].push_back(Span{a, start, end});
        }
        progress = true;
      }
    }
  }

  run.stopped_at = pc;
  run.waiting_for.assign(world, "");
  for (int w = 0; w < world; ++w)
    if (pc[w] < list_of(w).size()) input_time(w, list_of(w)[pc[w]], &run.waiting_for[w]);
  result.makespan = *std::max_element(rank_free.begin(), rank_free.end());
  result.idle_fraction.resize(world);
  for (int w = 0; w < world; ++w) {
    result.idle_fraction[w] = result.makespan > 0 ? 1.0 - result.busy[w] / result.makespan : 0.0;
    result.bubble += result.idle_fraction[w];
  }
  result.bubble /= world;
  for (const auto& replica : replicas) {
    const auto peaks = peak_stash(replica);
    result.peak_stash.insert(result.peak_stash.end(), peaks.begin(), peaks.end());
  }
  return run;
}

}  // namespace detail

SimResult simulate(const Schedule& schedule, const Costs& costs) {
  return simulate(schedule, std::vector<Costs>(std::size_t(std::max(schedule.ranks, 1)), costs));
}

SimResult simulate(const Schedule& schedule, const std::vector<Costs>& costs) {
  const auto stage_costs = per_stage(schedule, costs);
  for (const auto& c : stage_costs) check_costs(c);
  validate(schedule);
  for (const auto& list : schedule.actions)
    for (const Action& a : list)
      require(!is_reduction(a.op), "schedule: {} belongs to data-parallel replicas: simulate them together",
              to_token(a, schedule.chunks));
  return detail::run_world({lower(schedule)}, false, stage_costs).result;
}

SimResult simulate(const Replicated& replicated, const std::vector<Costs>& costs) {
  validate(replicated);
  const auto stage_costs = per_stage(replicated.replicas.front(), costs);
  for (const auto& c : stage_costs) check_costs(c);
  std::vector<Schedule> lowered;
  for (const auto& s : replicated.replicas) lowered.push_back(lower(s));
  return detail::run_world(lowered, replicated.ordered, stage_costs).result;
}

}  // namespace kpipe::schedule
