// kpipe-sim memory: every rank's predicted memory by category for a training configuration (kpipe-train's
// options), as the memory plan predicts it (memory/plan.hpp: what the run measures), with the step time and
// bubble the one cost model predicts on the configuration's transport.
//   kpipe-sim memory --preset bench --pipeline-size 2 --microbatches 8 [--recompute block] [--gpu h200]
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "common.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/planner/recommend.hpp"
#include "kpipe/schedule/simulate.hpp"

namespace kpipe::apps::sim {
namespace {

void print_memory_table(const std::vector<memory::RankMemory>& ranks) {
  std::printf("%-5s", "rank");
  for (auto c : memory::all_categories) std::printf(" %15s", memory::to_string(c));
  std::printf(" %15s\n", "total");
  for (const auto& r : ranks) {
    std::printf("%-5d", r.world_rank);
    for (auto c : memory::all_categories) std::printf(" %15.2f", double(r.bytes[int(c)]) / (1024.0 * 1024.0));
    std::printf(" %15.2f\n", double(r.total()) / (1024.0 * 1024.0));
  }
}

}  // namespace

int memory_main(int argc, char** argv) {
  MachineOptions o;
  const auto command = parse_subcommand(
      argc, argv, "kpipe-sim memory: every rank's predicted memory by category, and the step time",
      [&](CLI::App& app) { add_machine_options(app, o, "kpipe-sim memory"); });
  if (command.exit_now) return command.exit_code;
  const Config& config = command.config;
  const planner::Machine machine = machine_of(o);
  const auto desc = model::describe(config.model);
  // What the run executes on the configuration's transport (pipeline.transport = nccl: stream-ordered).
  const auto planned = schedule::plan(config, schedule::planned_delivery(config.pipeline.transport));
  const auto ranks = memory::plan_ranks(config, desc, planned);
  const auto sim = schedule::simulate(planned, planner::stage_costs(config, desc, planned.run, machine));
  // The steady state's step (simulate.hpp): a synchronous run's every step, an asynchronous one's between its
  // warm-up and drain, as kpipe-train measures it.
  std::printf("layout %s on %d ranks: predicted step %.4g s, bubble %s, in the steady state (%s)\n",
              planner::layout_name(config).c_str(), int(ranks.size()), sim.steady_step,
              percent(sim.steady_bubble).c_str(), costs_source(o).c_str());
  print_passes(planned);
  std::printf("\nmemory per rank, MiB (slots and backward sets per chunk; message buffers):\n");
  print_memory_table(ranks);
  for (const auto& r : ranks) {
    std::string pools;
    for (const auto& c : r.chunks) pools += fmt::format(" {}/{}", c.slots, c.backward_sets);
    std::printf("rank %d: slots/backward sets per chunk%s; %d message buffers\n", r.world_rank, pools.c_str(),
                r.message_buffers);
  }
  return 0;
}

}  // namespace kpipe::apps::sim
