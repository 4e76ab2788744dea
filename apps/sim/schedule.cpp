// kpipe-sim schedule: the lists a training configuration runs (or a schedule file), planned through the pass
// pipeline (schedule/plan.hpp, whose passes are printed), validated and simulated: the per-rank timeline as a
// text Gantt chart, the bubble per rank and overall, the makespan, the peak activation stash and the weight
// versions held; optionally the schedule itself and an SVG drawing of the timeline.
//   kpipe-sim schedule --schedule 1f1b --pipeline-size 4 --microbatches 8
//   kpipe-sim schedule --schedule interleaved --pipeline-size 4 --microbatches 8 --chunks 2 --cost-f 0.5 --cost-b 1
//   kpipe-sim schedule --schedule-file my.sched --print-schedule --lowered --svg my.svg
//   kpipe-sim schedule --schedule pipedream --pipeline-size 4 --microbatches 4 --steps 6 [--vertical-sync 1]
//   kpipe-sim schedule --preset small --pipeline-size 2 --microbatches 4 --pipeline.partition balanced
// Costs are seconds: --cost-* per chunk, or, where the command line names a model (--preset or a model.* key,
// here or in --config), each stage's from the one cost model (planner/costs.hpp) that `memory` and
// `recommend` price with. Asynchronous schedules (pipedream, 2bw) never flush: their steps are simulated
// through (--steps: that many, else warm-up, steady state and drain), and the steady state's figures are those
// of interest. pipeline.transport = nccl plans NCCL's stream-ordered lists; "auto" is taken as MPI here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/plural.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/render.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::apps::sim {
namespace {

using namespace schedule;

struct ScheduleOptions {
  Costs costs;                            // per chunk, without a model; the link is the machine's
  std::vector<std::string> cost_options;  // the --cost-* (and bytes) options given
  bool split = false, print_schedule = false, lowered = false, no_gantt = false;
  int width = 160;
  std::string svg;
  MachineOptions machine;
};

bool given(const CommandLine& line, const std::string& key) {
  return std::find(line.given.begin(), line.given.end(), key) != line.given.end();
}

// Whether the stages' costs come from the model: the command line names one (--preset, or a model key here
// or in --config).
bool names_a_model(const CommandLine& line) {
  return !line.preset_name.empty() || std::any_of(line.given.begin(), line.given.end(), [](const std::string& key) {
           return key.rfind("model.", 0) == 0;
         });
}

// Without a model the stages cost --cost-*, and the configuration's model and batch need only fit the stages and
// micro-batches (one layer a chunk at least, one sequence a micro-batch unless --batch says otherwise).
void fit_the_stages(CommandLine& line) {
  if (names_a_model(line)) return;
  Config& c = line.config;
  c.model.n_layers = std::max(c.model.n_layers, c.pipeline.pipeline_size * c.pipeline.chunks);
  if (!given(line, "train.batch")) c.train.batch = c.train.microbatches;
}

// The lists to simulate: the configuration's, or a schedule file's with its own sizes (those the command line
// gives must agree); --steps (train.steps, where given) is the steps an asynchronous run's lists hold.
Plan planned_lists(const CommandLine& line, bool split) {
  const Config& config = line.config;
  const auto& p = config.pipeline;
  const PlanOptions passes{0, given(line, "train.steps") ? config.train.steps : 0, split};
  const Delivery delivery = planned_delivery(p.transport);
  if (p.schedule_file.empty()) return plan(config, delivery, passes);
  require(!given(line, "pipeline.schedule"), "pipeline.schedule and pipeline.schedule_file: give one of them");
  const Schedule s = read_schedule_file(p.schedule_file, 0, given(line, "pipeline.chunks") ? p.chunks : 0);
  require(!given(line, "pipeline.pipeline_size") || p.pipeline_size == s.ranks,
          "pipeline.pipeline_size = {}: the schedule file has {} ranks (lines)", p.pipeline_size, s.ranks);
  require(!given(line, "train.microbatches") || config.train.microbatches == s.microbatches * p.data_parallel,
          "train.microbatches = {}: the schedule file has {} micro-batches per replica", config.train.microbatches,
          s.microbatches);
  return plan(s, fmt::format("read {}", p.schedule_file), Replication{p.data_parallel, p.dp_reduction,
              p.dp_reduction_group}, delivery, passes);
}

// Per virtual stage, the one cost model's seconds for the configuration's model on `world` (its sizes: a
// schedule file's where one is read); prints the model, the partition and each stage's costs.
std::vector<Costs> model_costs(Config config, const std::string& preset_name, const Replicated& world,
                               const MachineOptions& o) {
  const Schedule& s = world.replicas.front();
  config.pipeline.pipeline_size = s.ranks;
  config.pipeline.chunks = s.chunks;
  config.train.microbatches = s.microbatches * world.replica_count();
  const auto& m = config.model;
  const model::ModelDesc desc = model::describe(m);
  const auto ranges = partition::configured_partition(config, desc, world);
  const auto costs = planner::stage_costs(config, desc, world, machine_of(o));
  const double sequences = double(config.train.batch) / config.train.microbatches;
  std::printf("model %s: %d blocks, d_model %d, seq_len %d, vocabulary %d; %s partition, %g sequence%s per "
              "micro-batch%s, %s; %s\n", preset_name.empty() ? "configured" : preset_name.c_str(), m.n_layers,
              m.d_model, m.seq_len, m.vocab, std::string(to_string(config.pipeline.partition)).c_str(), sequences,
              sequences == 1 ? "" : "s",
              config.memory.recompute == Recompute::none ? ""
                                                         : fmt::format(", recompute {}", config.memory.recompute).c_str(),
              std::string(to_string(config.train.precision)).c_str(), costs_source(o).c_str());
  std::printf("%-6s %-5s %-10s %11s %11s %11s %11s\n", "stage", "rank", "layers", "F (s)", "B (s)", "R (s)",
              "step (s)");
  for (std::size_t k = 0; k < ranges.size(); ++k)
    std::printf("%-6zu %-5d %-10s %11.4g %11.4g %11.4g %11.4g\n", k, s.rank_of(int(k)),
                fmt::format("{}-{}", ranges[k].first, ranges[k].last - 1).c_str(), costs[k].f, costs[k].b, costs[k].r,
                costs[k].step);
  return costs;
}

// Per rank (world rank with replicas) the busy and idle time, the bubble, the steady state's bubble, the peak
// stash and the weight versions held against the bound (simulate.hpp: a synchronous run's steady state is its
// one step, its versions 1), then the makespan and the steady state.
void print_figures(const Schedule& s, const SimResult& sim, bool replicated) {
  std::printf("\n%-6s %10s %10s %8s %14s %11s %9s %7s\n", replicated ? "rank*" : "rank", "busy", "idle", "bubble",
              "steady bubble", "peak stash", "versions", "bound");
  for (std::size_t r = 0; r < sim.busy.size(); ++r)
    std::printf("%-6zu %10.4g %10.4g %8s %14s %11d %9d %7d\n", r, sim.busy[r], sim.makespan - sim.busy[r],
                percent(sim.idle_fraction[r]).c_str(), percent(sim.steady_idle_fraction[r]).c_str(), sim.peak_stash[r],
                sim.versions_held[r], versions_bound(s.updates, s.ranks, int(r) % s.ranks));
  if (replicated) std::printf("(* world rank = replica x %d + rank)\n", s.ranks);
  std::printf("makespan %.6g, bubble %s (mean idle fraction)\n", sim.makespan, percent(sim.bubble).c_str());
  std::printf("steady state: steps %d to %d, %.6g per step, bubble %s (%s rule)\n", sim.steady_first,
              sim.steady_last, sim.steady_step, percent(sim.steady_bubble).c_str(), to_string(s.updates));
}

void write_svg(const std::string& path, const std::string& title, const Schedule& s, const SimResult& sim) {
  SvgOptions svg;
  svg.title = title;
  kpipe::require_writable(path, fmt::format("--svg = '{}'", path));
  std::ofstream out(path);
  require(bool(out), "--svg = '{}': cannot write", path);
  out << timeline_svg(sim.timeline, s.chunks, svg);
  out.close();
  require(bool(out), "--svg = '{}': cannot write", path);
  std::printf("timeline drawn in %s\n", path.c_str());
}

}  // namespace

int schedule_main(int argc, char** argv) {
  ScheduleOptions o;
  const auto command = parse_subcommand(
      argc, argv,
      "kpipe-sim schedule: plan, validate and simulate a schedule; its timeline, bubble, makespan and stash. Costs "
      "in seconds: --cost-* per chunk, or each stage's from the model where --preset or a model key is given "
      "(without one, the model and batch need only fit the stages and micro-batches).",
      [&](CLI::App& app) {
        const std::string group = "[kpipe-sim schedule]";
        const CLI::Validator non_negative = number_in(0, 1e15, "0 to 1e15");  // finite simulated times
        const auto cost = [&](const std::string& name, double& field, const std::string& help) {
          app.add_option_function<double>(name, [&o, &field, name](double value) {
               field = value;
               o.cost_options.push_back(name);
             }, help)
              ->check(non_negative)->group(group)->default_str(fmt::format("{:g}", field));
        };
        cost("--cost-f", o.costs.f, "seconds of a forward, per micro-batch and chunk");
        cost("--cost-b", o.costs.b, "seconds of a full backward");
        cost("--cost-i", o.costs.i, "seconds of an input-gradient backward (I)");
        cost("--cost-w", o.costs.w, "seconds of a weight-gradient backward (W)");
        cost("--cost-r", o.costs.r, "seconds of recomputing a micro-batch's dropped activations, paid by every B and I");
        cost("--cost-step", o.costs.step, "seconds of the optimizer step (asynchronous: of each update)");
        cost("--activation-bytes", o.costs.activation_bytes, "bytes of one activation message");
        cost("--gradient-bytes", o.costs.gradient_bytes, "bytes of a chunk's weight gradients (the replicas' sum)");
        app.add_flag("--split-backward", o.split, "replace every B by I then W")->group(group);
        app.add_flag("--print-schedule", o.print_schedule, "print the schedule in text form")->group(group);
        app.add_flag("--lowered", o.lowered, "with --print-schedule: include the sends and receives")->group(group);
        app.add_flag("--no-gantt", o.no_gantt, "leave out the text Gantt chart")->group(group);
        app.add_option("--width", o.width, "most columns of the Gantt chart (0: no limit)")
            ->check(number_in(0, 1e6, "0 to 1e6"))->group(group)->capture_default_str();
        app.add_option("--svg", o.svg, "draw the timeline into this SVG file")->group(group);
        add_machine_options(app, o.machine, "kpipe-sim schedule");
      },
      fit_the_stages);
  if (command.exit_now) return command.exit_code;
  const Config& config = command.config;
  const bool from_model = names_a_model(command);
  require(!from_model || o.cost_options.empty(), "{}: the costs come from the model (--preset or a model key was "
          "given); give one of them", o.cost_options.empty() ? "" : o.cost_options.front());
  require(from_model || (o.machine.gpu.empty() && o.machine.profile.empty()),
          "--gpu and --profile give a model's layer times: with --preset or model keys");
  const Plan planned = planned_lists(command, o.split);
  const Schedule& s = planned.run.replicas.front();
  // The one place the kind picks words (and a picture): asynchronous replicas all run the same lists, each
  // update waiting for its stage's replicas' sum, so they run in lock step and one pipeline whose updates also
  // pay the sum's transfers is shown for all.
  const bool no_flush = s.asynchronous();
  const int replicas = planned.run.replica_count();
  const bool allreduce = config.pipeline.dp_reduction == DpReduction::allreduce;
  const bool lock_step = no_flush && replicas > 1, replicated = replicas > 1 && !lock_step;
  Plan shown = planned;
  if (lock_step) {
    shown.run.replicas.resize(1);
    shown.sums = SumRoute::none;
  }
  const Replicated& world = shown.run;
  const planner::Machine machine = machine_of(o.machine);
  Costs fixed = o.costs;
  fixed.latency = machine.latency;
  fixed.per_byte = 1.0 / machine.bytes_per_second;
  std::vector<Costs> costs =
      from_model ? model_costs(config, command.preset_name, world, o.machine) : std::vector<Costs>(s.ranks, fixed);
  if (lock_step) {
    // ordered: d - 1 hops of the running sum, then a broadcast (ceil(log2 d) hops); allreduce: 2 ceil(log2 d).
    const int log2_d = int(std::ceil(std::log2(double(replicas))));
    const int hops = allreduce ? 2 * log2_d : replicas - 1 + log2_d;
    for (auto& c : costs) c.step += hops * (c.latency + c.gradient_bytes * c.per_byte);
  }
  const SimResult sim = simulate(shown, costs);

  const auto& p = config.pipeline;
  std::string name = p.schedule_file.empty() ? fmt::format("{}{}{}", p.schedule, o.split ? " (split backward)" : "",
                                                           p.vertical_sync ? " --vertical-sync 1" : "")
                                             : p.schedule_file;
  if (lock_step)
    name += fmt::format(" x {} replicas (their sum at every update, {}: in lock step, one pipeline shown)", replicas,
                        allreduce ? "allreduce" : "ordered");
  else if (replicated)
    name += allreduce ? fmt::format(" x {} replicas (allreduce)", replicas)
                      : fmt::format(" x {} replicas (ordered, groups of {})", replicas, p.dp_reduction_group);
  std::printf("schedule %s: %s, %s%s, %s\n", name.c_str(), quantity(s.ranks, "rank").c_str(),
              quantity(s.microbatches, "micro-batch").c_str(),
              no_flush ? fmt::format(" per step, {} without a flush", quantity(s.steps, "step")).c_str() : "",
              quantity(s.chunks, "chunk").c_str());
  const Costs& c = from_model ? costs.front() : fixed;
  if (from_model)
    std::printf("costs per stage from the model (seconds, above); latency=%g bandwidth=%g activation_bytes=%g\n",
                c.latency, machine.bytes_per_second, c.activation_bytes);
  else
    std::printf("costs per chunk (seconds): f=%g b=%g i=%g w=%g r=%g step=%g latency=%g bandwidth=%g "
                "activation_bytes=%g%s\n",
                c.f, c.b, c.i, c.w, c.r, c.step, c.latency, machine.bytes_per_second, c.activation_bytes,
                replicas > 1 ? fmt::format(" gradient_bytes={:g}", c.gradient_bytes).c_str() : "");
  print_passes(planned);
  if (o.print_schedule)
    for (int replica = 0; replica < world.replica_count(); ++replica) {
      if (replicated) std::printf("\n# replica %d", replica);
      std::printf("\n%s", to_text(o.lowered ? world.replicas[replica] : strip_messages(world.replicas[replica])).c_str());
    }
  if (!o.no_gantt) {
    GanttOptions gantt;
    gantt.max_width = o.width;
    std::printf("\n%s", gantt_text(sim.timeline, s.chunks, gantt).c_str());
  }
  print_figures(s, sim, replicated);
  if (!o.svg.empty()) {
    std::string versions;
    for (int v : sim.versions_held) versions += fmt::format("{}{}", versions.empty() ? "" : "/", v);
    write_svg(o.svg,
              no_flush ? fmt::format("{}: p = {}, m = {}, {} steps, no flush; steady bubble {}; weight versions per "
                                     "rank {}", name, s.ranks, s.microbatches, s.steps, percent(sim.steady_bubble),
                                     versions)
                       : fmt::format("{}: p = {}, m = {}{}; makespan {:.4g}, bubble {}", name, s.ranks, s.microbatches,
                                     s.chunks > 1 ? fmt::format(", v = {}", s.chunks) : "", sim.makespan,
                                     percent(sim.bubble)),
              s, sim);
  }
  return 0;
}

}  // namespace kpipe::apps::sim
