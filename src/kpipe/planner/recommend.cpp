#include "kpipe/planner/recommend.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kpipe/core/bytes.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/simulate.hpp"

namespace kpipe::planner {

namespace {

struct Layout {
  ScheduleKind schedule;
  int chunks;
};

const Layout layouts[] = {{ScheduleKind::gpipe, 1},       {ScheduleKind::one_f_one_b, 1}, {ScheduleKind::zb_h1, 1},
                          {ScheduleKind::interleaved, 2}, {ScheduleKind::interleaved, 3}, {ScheduleKind::interleaved, 4},
                          {ScheduleKind::zb_v, 2}};
const Recompute recompute_modes[] = {Recompute::none, Recompute::attention, Recompute::mlp, Recompute::block};
const PartitionKind partitions[] = {PartitionKind::uniform, PartitionKind::balanced};

// Every layout of base on `ranks` ranks; `visit(candidate)` for each.
template <class Visit> int search_layouts(const Config& base, int ranks, const Machine& machine, const Visit& visit) {
  const auto desc = model::describe(base.model);
  const int layers = int(desc.layers.size());
  int evaluated = 0;
  for (int p = 1; p <= ranks; ++p) {
    if (ranks % p != 0) continue;
    const int d = ranks / p;
    for (const Layout& layout : layouts) {
      if (layout.chunks > 1 && p == 1) continue;  // several chunks on one rank gain nothing
      if (p * layout.chunks > layers) continue;
      for (int m = d; m <= std::min(base.train.batch, 256); m += d) {
        if (base.train.batch % m != 0) continue;
        const int local = m / d;
        if (layout.schedule == ScheduleKind::interleaved && local % p != 0) continue;
        if (base.pipeline.dp_reduction == DpReduction::ordered && d > 1 && local % base.pipeline.dp_reduction_group != 0) continue;
        Config c = base;
        c.pipeline.pipeline_size = p;
        c.pipeline.data_parallel = d;
        c.pipeline.schedule = layout.schedule;
        c.pipeline.chunks = layout.chunks;
        c.pipeline.schedule_file.clear();
        c.train.microbatches = m;
        // What runs on the configuration's transport, validated once per schedule.
        const schedule::Plan lists = schedule::plan(c, schedule::planned_delivery(c.pipeline.transport));
        const schedule::Replicated& replicated = lists.run;
        for (const Recompute recompute : recompute_modes)
          for (const PartitionKind partition : partitions) {
            c.memory.recompute = recompute;
            c.pipeline.partition = partition;
            Candidate candidate;
            candidate.config = c;
            for (int stage = 0; stage < p; ++stage) {  // replicas differ in their reduction's actions alone
              const auto plan = memory::plan_rank(c, desc, lists, 0, stage);
              if (plan.total() > candidate.memory) {
                candidate.memory = plan.total();
                candidate.heaviest_rank = stage;
              }
            }
            const auto costs = stage_costs(c, desc, replicated, machine);
            const auto sim = schedule::simulate(lists, costs);
            candidate.step_seconds = sim.makespan;
            candidate.bubble = sim.bubble;
            ++evaluated;
            visit(candidate);
          }
      }
    }
  }
  return evaluated;
}

bool faster(const Candidate& a, const Candidate& b) {
  if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
  return a.memory < b.memory;
}

}  // namespace

Recommendation recommend(const Config& base, const Search& search) {
  require(search.ranks >= 1, "--ranks = {}: need at least one rank", search.ranks);
  require(search.memory_per_rank > 0, "--memory-per-rank = {}: need a positive size", search.memory_per_rank);
  require(search.top >= 1, "--top = {}: need at least one", search.top);
  Recommendation r;
  std::vector<Candidate> fitting;
  r.layouts = search_layouts(base, search.ranks, search.machine, [&](const Candidate& c) {
    if (!r.leanest || c.memory < r.leanest->memory) r.leanest = c;
    if (c.memory <= search.memory_per_rank) fitting.push_back(c);
  });
  require(r.layouts > 0, "no layout of the model on {} ranks (train.batch = {}, {} layers)", search.ranks,
          base.train.batch, base.model.n_layers + 2);
  r.fitting = int(fitting.size());
  std::sort(fitting.begin(), fitting.end(), faster);
  if (int(fitting.size()) > search.top) fitting.resize(search.top);
  r.best = fitting;
  if (r.best.empty()) {
    for (int more = search.ranks * 2; more <= search.ranks * 8; more *= 2) {
      std::optional<Candidate> leanest;
      search_layouts(base, more, search.machine, [&](const Candidate& c) {
        if (!leanest || c.memory < leanest->memory) leanest = c;
      });
      if (!leanest) break;  // more stages than layers
      r.ranks_needed = more;
      r.leanest_there = leanest;
      if (leanest->memory <= search.memory_per_rank) break;
    }
  }
  return r;
}

std::string layout_name(const Config& c) {
  const auto& p = c.pipeline;
  return fmt::format("p{} x d{} {}{} m={} recompute={} partition={}", p.pipeline_size, p.data_parallel, p.schedule,
                     p.chunks > 1 ? fmt::format(" v={}", p.chunks) : "", c.train.microbatches, c.memory.recompute,
                     p.partition);
}

std::string command_line(const Candidate& candidate, int ranks, const std::vector<std::string>& model_arguments,
                         const std::string& memory_per_rank) {
  const auto& c = candidate.config;
  std::string line = ranks > 1 ? fmt::format("mpiexec -n {} kpipe-train", ranks) : "kpipe-train";
  for (const auto& a : model_arguments) line += " " + a;
  line += fmt::format(" --pipeline-size {} --data-parallel {} --schedule {}", c.pipeline.pipeline_size,
                      c.pipeline.data_parallel, c.pipeline.schedule);
  if (c.pipeline.chunks > 1) line += fmt::format(" --chunks {}", c.pipeline.chunks);
  line += fmt::format(" --microbatches {} --recompute {} --pipeline.partition {} --memory-limit-per-rank {}",
                      c.train.microbatches, c.memory.recompute, c.pipeline.partition, memory_per_rank);
  return line;
}

}  // namespace kpipe::planner
