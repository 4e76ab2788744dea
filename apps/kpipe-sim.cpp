// kpipe-sim: a pipeline schedule without MPI. Generates (or reads) a schedule, validates it, simulates one
// step and prints the per-rank timeline as a text Gantt chart, the bubble per rank and overall, the makespan
// and the peak activation stash; optionally the schedule itself and an SVG drawing of the timeline.
//   kpipe-sim --schedule 1f1b --stages 4 --microbatches 8
//   kpipe-sim --schedule interleaved --stages 4 --microbatches 8 --chunks 2 --cost-f 0.5 --cost-b 1 --svg t.svg
//   kpipe-sim --schedule-file my.sched --print-schedule
//   kpipe-sim --schedule 1f1b --stages 4 --preset small --vocab 8192 --partition balanced
//   kpipe-sim --schedule pipedream --stages 4 --microbatches 4 --steps 6 [--vertical-sync 1] --svg pd.svg
// Asynchronous schedules (pipedream, 2bw) never flush: --steps steps are simulated through, each ending at a
// step boundary, and the figures of interest are the steady state's (between the warm-up and the drain) and
// the weight versions each rank holds.
// The lists shown and simulated are those the run would execute: through the pass pipeline
// (schedule/plan.hpp), whose passes are printed. --transport nccl (with a training configuration:
// pipeline.transport = nccl) plans for NCCL's stream-ordered delivery: the stream-order pass, the proof, and
// where the replicas' gradient sums go; "auto", which kpipe-train resolves per build when it runs, is taken
// as MPI here, as "mpi" is.
//   kpipe-sim --schedule interleaved --stages 2 --microbatches 4 --chunks 2 --transport nccl --print-schedule --lowered
// With --preset, each stage's costs come from the partitioned model's FLOPs (GFLOP per micro-batch of
// --sequences sequences, --recompute's recomputation included; planner/costs.hpp, the cost model that
// --memory and --recommend use), so the embedding and the LM head weigh what they weigh.
// With a training configuration (kpipe-train's options) instead of a bare schedule:
//   kpipe-sim --memory [kpipe-train options]    every rank's predicted memory by category, and the step time
//   kpipe-sim --recommend --ranks N --memory-per-rank SIZE [model options]   the fastest layouts that fit
//   kpipe-sim --kernels [--gpu h200] [model options]   each kernel of a micro-batch, its GPU bound (sim_kernels.cpp)
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "kpipe/core/bytes.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/planner/costs.hpp"
#include "kpipe/model/roofline.hpp"
#include "kpipe/planner/recommend.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/render.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"
#include "kpipe/schedule/versions.hpp"
#include "program.hpp"
#include "sim_kernels.hpp"

namespace {

using namespace kpipe;
using namespace kpipe::schedule;

struct Options {
  std::string schedule_name = "1f1b";
  ScheduleKind schedule = ScheduleKind::one_f_one_b;  // from schedule_name
  int stages = 4, microbatches = 8, chunks = 1;
  int steps = 0;               // asynchronous schedules: steps simulated (0: the validated horizon's)
  int vertical_sync = 0;  // pipedream: 1, every stage reads the version stage 0 read (kpipe-train's value)
  bool split = false;
  std::string schedule_file;
  Costs costs;
  // Bytes per time unit over a link (costs.per_byte = 1 / bandwidth): the planner's name for the link's cost;
  // unlimited by default, a message costing its latency alone.
  double bandwidth = std::numeric_limits<double>::infinity();
  bool print_schedule = false, lowered = false, no_gantt = false;
  std::string svg;
  int width = 160;
  int replicas = 1, dp_group = 1;  // data-parallel replicas of the schedule, ordered reduction's group
  bool allreduce = false;
  // --preset: costs from the model, partitioned, recomputed and stored (messages) by default as kpipe-train's
  // configuration says.
  std::string preset, partition_name{to_string(Config{}.pipeline.partition)},
      recompute_name{to_string(Config{}.memory.recompute)}, precision_name{to_string(Config{}.train.precision)};
  PartitionKind partition{};  // from partition_name
  Precision precision{};      // from precision_name
  Recompute recompute{};      // from recompute_name
  int vocab = 0, sequences = 1;
  std::string transport_name = "auto";  // the delivery planned for: nccl is stream-ordered; mpi and auto buffered
};

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

std::string plural(int n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

// The lists the options ask for, through the pass pipeline (schedule/plan.hpp) as kpipe-train plans them: a
// generated schedule from the configuration the options make, or a schedule file with its own sizes.
Plan planned_lists(const Options& o, const CLI::App& app, Delivery delivery) {
  const bool asynchronous_name = is_asynchronous(o.schedule);
  require(o.vertical_sync == 0 || o.vertical_sync == 1, "--vertical-sync = {}: expected 0 or 1", o.vertical_sync);
  require(o.vertical_sync == 0 || (o.schedule == ScheduleKind::pipedream && o.schedule_file.empty()),
          "--vertical-sync = 1 needs --schedule pipedream (got --schedule {})", o.schedule);
  require(app.count("--steps") == 0 || asynchronous_name,
          "--steps = {}: only asynchronous schedules (pipedream, 2bw) span several steps", o.steps);
  const PlanOptions passes{0, o.steps, o.split};
  const Replication replication{o.replicas, o.allreduce ? DpReduction::allreduce : DpReduction::ordered, o.dp_group};
  if (!o.schedule_file.empty()) {
    require(app.count("--schedule") == 0, "--schedule and --schedule-file: give one of them");
    const Schedule s = read_schedule_file(o.schedule_file, 0, app.count("--chunks") ? o.chunks : 0);
    // Sizes given on the command line must agree with the file's.
    require(!app.count("--stages") || o.stages == s.ranks, "--stages = {}: the schedule file has {} ranks (lines)",
            o.stages, s.ranks);
    require(!app.count("--microbatches") || o.microbatches == s.microbatches,
            "--microbatches = {}: the schedule file has {} micro-batches", o.microbatches, s.microbatches);
    return plan(s, fmt::format("read {}", o.schedule_file), replication, delivery, passes);
  }
  require(!asynchronous_name || app.count("--chunks") == 0 || o.chunks == 1,
          "--chunks = {}: asynchronous schedules run one chunk per rank (the version rule is per stage)", o.chunks);
  Config config;
  auto& p = config.pipeline;
  p.schedule = o.schedule;
  p.pipeline_size = o.stages;
  // zb-v runs two chunks per rank: that is the default for it.
  p.chunks = o.schedule == ScheduleKind::zb_v && app.count("--chunks") == 0 ? 2 : o.chunks;
  p.vertical_sync = o.vertical_sync;
  p.data_parallel = replication.replicas;
  p.dp_reduction = replication.reduction;
  p.dp_reduction_group = replication.group;
  config.train.microbatches = o.microbatches * o.replicas;  // --microbatches: per replica
  return plan(config, delivery, passes);
}

// Option checks whose messages read as one line ("--stages: 0 is not a positive integer").
const CLI::Validator at_least_one(
    [](std::string& text) {
      int value = 0;
      return CLI::detail::lexical_cast(text, value) && value >= 1 ? "" : text + " is not a positive integer";
    },
    "");
// A number from `low` to `high` (`range` says so in the message). Bounded so that a step's simulated times stay
// finite: 1e308 overflowed them to infinity and the simulation to a deadlock.
CLI::Validator number_in(double low, double high, const std::string& range) {
  return CLI::Validator(
      [=](std::string& text) {
        double value = 0;
        return CLI::detail::lexical_cast(text, value) && value >= low && value <= high
                   ? ""
                   : text + " is not a number from " + range;
      },
      "");
}
const CLI::Validator non_negative = number_in(0, 1e15, "0 to 1e15");  // a time, a size or a count
const CLI::Validator a_rate = number_in(1, 1e21, "1 to 1e21");         // FLOP/s, bytes/s

// The library names configuration keys; here the user typed options.
std::string in_option_terms(std::string message) {
  const std::pair<const char*, const char*> names[] = {{"pipeline.schedule_file", "--schedule-file"},
                                                       {"pipeline.schedule ", "--schedule "},
                                                       {"pipeline.pipeline_size", "--stages"},
                                                       {"train.microbatches", "--microbatches"},
                                                       {"pipeline.chunks", "--chunks"},
                                                       {"pipeline.dp_reduction_group", "--dp-group"},
                                                       {"pipeline.data_parallel", "--replicas"},
                                                       {"memory.recompute", "--recompute"},
                                                       {"split_backward", "--split-backward"}};
  for (const auto& [key, option] : names)
    for (auto at = message.find(key); at != std::string::npos; at = message.find(key, at))
      message.replace(at, std::string(key).size(), option);
  return message;
}

// Per virtual stage, from the model's FLOPs (the planner's cost model at 1 GFLOP/s, so in GFLOP); prints the
// partition and what each stage holds.
std::vector<Costs> model_costs(const Options& o, const Replicated& world) {
  const Schedule& s = world.replicas.front();
  ModelConfig model = preset(o.preset).model;
  if (o.vocab > 0) model.vocab = o.vocab;
  const model::ModelDesc desc = model::describe(model);
  const partition::InFlight in_flight = partition::in_flight(world, o.sequences, s.steps);
  const auto ranges = partition::partition_layers(desc, s.ranks, s.chunks, o.partition, in_flight);
  planner::Machine gflops;
  gflops.flops_per_second = 1e9;
  const auto costs =
      planner::stage_costs(desc, planner::layer_seconds(desc, gflops, o.recompute), ranges,
                           o.sequences, o.costs);
  const auto memory = partition::stage_memory(partition::layer_memory(desc, s.ranks, s.chunks, in_flight), ranges);
  // A message is one micro-batch's activation (or its gradient) in the precision's storage.
  std::vector<Costs> priced = costs;
  if (o.costs.activation_bytes == 0)
    for (auto& c : priced)
      c.activation_bytes = double(o.sequences) * model.seq_len * model.d_model * activation_bytes(o.precision);
  std::printf("model %s: %d blocks, d_model %d, seq_len %d, vocabulary %d; %s partition, %d sequence%s per "
              "micro-batch%s, %s\n", o.preset.c_str(), model.n_layers, model.d_model, model.seq_len, model.vocab,
              std::string(to_string(o.partition)).c_str(), o.sequences, o.sequences == 1 ? "" : "s",
              o.recompute == Recompute::none ? "" : fmt::format(", recompute {}", o.recompute).c_str(),
              std::string(to_string(o.precision)).c_str());
  std::printf("%-6s %-5s %-10s %10s %10s %10s %12s\n", "stage", "rank", "layers", "F GFLOP", "B GFLOP", "R GFLOP",
              "memory MB");
  for (std::size_t k = 0; k < ranges.size(); ++k)
    std::printf("%-6zu %-5d %-10s %10.4g %10.4g %10.4g %12.1f\n", k, s.rank_of(int(k)),
                fmt::format("{}-{}", ranges[k].first, ranges[k].last - 1).c_str(), costs[k].f, costs[k].b, costs[k].r,
                memory[k] * 4 / 1e6);  // float32 scalars
  return priced;
}

// Per rank (world rank with replicas) the busy and idle time, the bubble and the peak stash (asynchronous
// lists: also the steady state's bubble and the weight versions held), then the makespan.
void print_figures(const Schedule& s, const SimResult& sim, bool replicated) {
  if (!s.asynchronous()) {
    std::printf("\n%-6s %10s %10s %8s %11s\n", replicated ? "rank*" : "rank", "busy", "idle", "bubble", "peak stash");
    for (std::size_t r = 0; r < sim.busy.size(); ++r)
      std::printf("%-6zu %10.4g %10.4g %8s %11d\n", r, sim.busy[r], sim.makespan - sim.busy[r],
                  percent(sim.idle_fraction[r]).c_str(), sim.peak_stash[r]);
  } else {
    // No flush: the whole run's bubble is warm-up and drain; the steady state's is what a long run sees.
    // Memory per rank: the activations stashed (micro-batches in flight) and the weight versions held.
    std::printf("\n%-6s %10s %10s %8s %14s %11s %9s %7s\n", replicated ? "rank*" : "rank", "busy", "idle", "bubble",
                "steady bubble", "peak stash", "versions", "theory");
    for (std::size_t r = 0; r < sim.busy.size(); ++r)
      std::printf("%-6zu %10.4g %10.4g %8s %14s %11d %9d %7d\n", r, sim.busy[r], sim.makespan - sim.busy[r],
                  percent(sim.idle_fraction[r]).c_str(), percent(sim.steady_idle_fraction[r]).c_str(),
                  sim.peak_stash[r], sim.versions_held[r],
                  versions_bound(s.updates, s.ranks, int(r) % s.ranks));
  }
  if (replicated) std::printf("(* world rank = replica x %d + rank)\n", s.ranks);
  std::printf("makespan %.6g, bubble %s (mean idle fraction)\n", sim.makespan, percent(sim.bubble).c_str());
  if (s.asynchronous()) {
    std::printf("steady state: steps %d to %d, %.6g per step, bubble %s; the %s rule holds at most p - s, p or 2 "
                "weight versions (pipedream, vertical-sync, 2bw): the versions column\n",
                sim.steady_first, sim.steady_last, sim.steady_step, percent(sim.steady_bubble).c_str(),
                to_string(s.updates));
  }

}

void write_svg(const std::string& path, const std::string& name, const Schedule& s, const SimResult& sim) {
  SvgOptions svg;
  svg.title = fmt::format("{}: p = {}, m = {}{}; makespan {:.4g}, bubble {}", name, s.ranks, s.microbatches,
                          s.chunks > 1 ? fmt::format(", v = {}", s.chunks) : "", sim.makespan, percent(sim.bubble));
  if (s.asynchronous()) {
    std::string versions;
    for (int v : sim.versions_held) versions += fmt::format("{}{}", versions.empty() ? "" : "/", v);
    svg.title = fmt::format("{}: p = {}, m = {}, {} steps, no flush; steady bubble {}; weight versions per rank {}",
                            name, s.ranks, s.microbatches, s.steps, percent(sim.steady_bubble), versions);
  }
  kpipe::require_writable(path, fmt::format("--svg = '{}'", path));
  std::ofstream out(path);
  require(bool(out), "--svg = '{}': cannot write", path);
  out << timeline_svg(sim.timeline, s.chunks, svg);
  out.close();
  require(bool(out), "--svg = '{}': cannot write", path);
  std::printf("timeline drawn in %s\n", path.c_str());
}

// Where the replicas' sums go and what the passes did, in one line.
void print_passes(const Plan& plan) {
  std::printf("passes: %s; %s delivery%s\n", passes_text(plan).c_str(), std::string(to_string(plan.delivery)).c_str(),
              plan.sums == SumRoute::none ? "" : fmt::format(", gradient sums {}", plan.sums).c_str());
}

// The schedule as the output names it: its name or file, and its replicas.
std::string schedule_name(const Options& o, bool async_replicas, bool replicated) {
  std::string name = o.schedule_file.empty() ? fmt::format("{}{}{}", o.schedule, o.split ? " (split backward)" : "",
                                                           o.vertical_sync ? " --vertical-sync 1" : "")
                                             : o.schedule_file;
  if (async_replicas)
    name += fmt::format(" x {} replicas (their sum at every update, {}: in lock step, one pipeline shown)", o.replicas,
                        o.allreduce ? "allreduce" : "ordered");
  else if (replicated)
    name += o.allreduce ? fmt::format(" x {} replicas (allreduce)", o.replicas)
                        : fmt::format(" x {} replicas (ordered, groups of {})", o.replicas, o.dp_group);
  return name;
}

int run(Options o, const CLI::App& app) {
  o.costs.per_byte = 1.0 / o.bandwidth;
  o.schedule = option_value<ScheduleKind>("--schedule", o.schedule_name);
  o.partition = option_value<PartitionKind>("--partition", o.partition_name);
  o.recompute = option_value<Recompute>("--recompute", o.recompute_name);
  o.precision = option_value<Precision>("--precision", o.precision_name);
  const Delivery delivery = planned_delivery(option_value<TransportChoice>("--transport", o.transport_name));
  const bool from_model = !o.preset.empty();
  require(from_model || (app.count("--vocab") == 0 && app.count("--partition") == 0 && app.count("--sequences") == 0 &&
                         app.count("--recompute") == 0 && app.count("--precision") == 0),
          "--vocab, --partition, --sequences, --recompute and --precision need --preset (costs from a model)");
  // With replicas, every replica's lists (the ordered reduction's pass, or an allreduce after them).
  // Asynchronous lists are the same in every replica, and each update waits for the stage's replicas' sum:
  // the replicas run in lock step, so one pipeline whose updates also pay the sum's transfers stands for all.
  const Plan planned = planned_lists(o, app, delivery);
  const Schedule& s = planned.run.replicas.front();
  const bool async_replicas = s.asynchronous() && o.replicas > 1;
  const bool replicated = o.replicas > 1 && !async_replicas;
  Plan shown = planned;
  if (async_replicas) {
    shown.run.replicas.resize(1);
    shown.sums = SumRoute::none;
  }
  const Replicated& world = shown.run;
  std::vector<Costs> costs = from_model ? model_costs(o, world) : std::vector<Costs>(s.ranks, o.costs);
  if (async_replicas) {
    // ordered: d - 1 hops of the running sum, then a broadcast (ceil(log2 d) hops); allreduce: 2 ceil(log2 d).
    const int log2_d = int(std::ceil(std::log2(double(o.replicas))));
    const int hops = o.allreduce ? 2 * log2_d : o.replicas - 1 + log2_d;
    for (auto& c : costs) c.step += hops * (c.latency + c.gradient_bytes * c.per_byte);
  }
  const SimResult sim = simulate(shown, costs);
  const std::string name = schedule_name(o, async_replicas, replicated);

  std::printf("schedule %s: %s, %s%s, %s\n", name.c_str(), plural(s.ranks, "rank", "ranks").c_str(),
              plural(s.microbatches, "micro-batch", "micro-batches").c_str(),
              s.asynchronous() ? fmt::format(" per step, {} without a flush", plural(s.steps, "step", "steps")).c_str() : "",
              plural(s.chunks, "chunk", "chunks").c_str());
  const Costs& c = o.costs;
  if (from_model)
    std::printf("costs per stage from the model (GFLOP, above); step=%g latency=%g bandwidth=%g activation_bytes=%g\n",
                c.step, c.latency, o.bandwidth, costs.front().activation_bytes);
  else
    std::printf("costs per chunk: f=%g b=%g i=%g w=%g r=%g step=%g latency=%g bandwidth=%g activation_bytes=%g%s\n",
                c.f, c.b, c.i, c.w, c.r, c.step, c.latency, o.bandwidth, c.activation_bytes,
                o.replicas > 1 ? fmt::format(" gradient_bytes={:g}", c.gradient_bytes).c_str() : "");
  print_passes(planned);
  if (o.print_schedule) {
    for (int replica = 0; replica < world.replica_count(); ++replica) {
      if (replicated) std::printf("\n# replica %d", replica);
      std::printf("\n%s", to_text(o.lowered ? world.replicas[replica] : strip_messages(world.replicas[replica])).c_str());
    }
  }
  if (!o.no_gantt) {
    GanttOptions gantt;
    gantt.max_width = o.width;
    std::printf("\n%s", gantt_text(sim.timeline, s.chunks, gantt).c_str());
  }
  print_figures(s, sim, replicated);
  if (!o.svg.empty()) write_svg(o.svg, name, s, sim);
  return 0;
}

// ---- --memory and --recommend: a training configuration ----

struct ConfigModeOptions {
  bool recommend = false, memory = false;
  int ranks = 0, top = 5;
  std::string memory_per_rank, profile, gpu;
  planner::Machine machine;
};

// The options of this mode, as opposed to the configuration's (which go on to the recommended command lines).
const std::vector<std::string> plan_flags = {"--recommend", "--memory"};
const std::vector<std::string> plan_options = {"--ranks",   "--memory-per-rank", "--top",      "--profile",
                                               "--gpu",     "--flops-per-second", "--latency", "--bandwidth"};

// The keys a recommendation sets (with their short spellings): the user's own values for them are dropped.
const std::vector<std::string> layout_options = {
    "--pipeline.pipeline_size", "--pipeline-size", "--pipeline.data_parallel", "--data-parallel",
    "--pipeline.schedule",      "--schedule",      "--pipeline.chunks",        "--chunks",
    "--train.microbatches",     "--microbatches",  "--memory.recompute",       "--recompute",
    "--pipeline.partition",     "--memory.limit_per_rank", "--memory-limit-per-rank", "--pipeline.schedule_file",
    "--schedule-file"};

std::vector<std::string> model_arguments(int argc, char** argv) {
  std::vector<std::string> kept;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i], name = a.substr(0, a.find('='));
    if (std::find(plan_flags.begin(), plan_flags.end(), a) != plan_flags.end()) continue;
    if (std::find(plan_options.begin(), plan_options.end(), name) != plan_options.end() ||
        std::find(layout_options.begin(), layout_options.end(), name) != layout_options.end()) {
      if (name == a) ++i;  // its value follows
      continue;
    }
    kept.push_back(a.find(' ') == std::string::npos ? a : "'" + a + "'");
  }
  return kept;
}

planner::Machine machine_of(const ConfigModeOptions& o) {
  planner::Machine m = o.machine;
  if (!o.profile.empty()) m.profile = planner::read_profile(o.profile);
  if (!o.gpu.empty()) m.gpu = model::gpu_spec(o.gpu);
  return m;
}

std::string costs_source(const ConfigModeOptions& o) {
  if (!o.profile.empty()) return fmt::format("layer times measured in {}", o.profile);
  if (!o.gpu.empty()) return fmt::format("layer times from the work ledger's roofline on an {}", o.gpu);
  return fmt::format("model FLOPs at {:g} FLOP/s per rank", o.machine.flops_per_second);
}

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

int run_memory(const Config& config, const ConfigModeOptions& o) {
  const auto desc = model::describe(config.model);
  // What the run executes on the configuration's transport (pipeline.transport = nccl: stream-ordered).
  const auto planned = schedule::plan(config, schedule::planned_delivery(config.pipeline.transport));
  const auto ranks = memory::plan_ranks(config, desc, planned);
  const auto costs = planner::stage_costs(config, desc, planned.run, machine_of(o));
  const auto sim = schedule::simulate(planned, costs);
  const auto& lists = planned.run.replicas.front();
  // The steady state's step (asynchronous lists: between warm-up and drain, as kpipe-train measures it).
  const bool no_flush = lists.asynchronous();
  std::printf("layout %s on %d ranks: predicted step %.4g s%s, bubble %s%s (%s)\n",
              planner::layout_name(config).c_str(), int(ranks.size()), sim.steady_step,
              no_flush ? " in the steady state" : "", percent(sim.steady_bubble).c_str(), no_flush ? " there" : "",
              costs_source(o).c_str());
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

int run_recommend(const Config& config, const ConfigModeOptions& o, const std::vector<std::string>& model_args) {
  require(o.ranks >= 1, "--ranks = {}: the number of ranks to lay the model out on (at least 1)", o.ranks);
  const auto budget = parse_bytes(o.memory_per_rank);
  require(budget.has_value() && *budget > 0, "--memory-per-rank = '{}': expected a size such as 512MiB, 6GiB, 2e9",
          o.memory_per_rank);
  planner::Search search;
  search.ranks = o.ranks;
  search.memory_per_rank = *budget;
  search.top = o.top;
  search.machine = machine_of(o);
  const auto r = planner::recommend(config, search);
  const auto desc = model::describe(config.model);
  std::printf("model: %lld parameters, %d layers, d_model %d, seq_len %d, batch %d; costs: %s\n",
              static_cast<long long>(desc.num_params()), config.model.n_layers, config.model.d_model,
              config.model.seq_len, config.train.batch, costs_source(o).c_str());
  std::printf("%d layouts on %d ranks, %d fit in %s per rank\n", r.layouts, o.ranks, r.fitting,
              format_bytes(*budget).c_str());
  if (r.best.empty()) {
    std::printf("\nnothing fits: the leanest layout on %d ranks needs %s per rank (%s)\n", o.ranks,
                format_bytes(r.leanest->memory).c_str(), planner::layout_name(r.leanest->config).c_str());
    if (r.ranks_needed && r.leanest_there->memory <= *budget)
      std::printf("with %d ranks it fits: %s per rank (%s)\n  %s\n", *r.ranks_needed,
                  format_bytes(r.leanest_there->memory).c_str(), planner::layout_name(r.leanest_there->config).c_str(),
                  planner::command_line(*r.leanest_there, *r.ranks_needed, model_args, o.memory_per_rank).c_str());
    else if (r.ranks_needed)
      std::printf("not even on %d ranks, whose leanest layout needs %s per rank (%s): a smaller model, batch or "
                  "sequence\n",
                  *r.ranks_needed, format_bytes(r.leanest_there->memory).c_str(),
                  planner::layout_name(r.leanest_there->config).c_str());
    else
      std::printf("and no layout has more stages (the model has %d layers)\n", config.model.n_layers + 2);
    return 1;
  }
  std::printf("\n%3s %12s %8s %14s  %s\n", "#", "step (s)", "bubble", "memory/rank", "layout");
  int index = 0;
  for (const auto& c : r.best) {
    std::printf("%3d %12.4g %8s %14s  %s\n", ++index, c.step_seconds, percent(c.bubble).c_str(),
                format_bytes(c.memory).c_str(), planner::layout_name(c.config).c_str());
    std::printf("    %s\n", planner::command_line(c, o.ranks, model_args, o.memory_per_rank).c_str());
  }
  return 0;
}

int plan_main(int argc, char** argv) {
  ConfigModeOptions o;
  const auto command = parse_command_line("kpipe-sim", argc, argv, [&](CLI::App& app) {
    app.add_flag("--recommend", o.recommend, "search the layouts of the model on --ranks ranks that fit --memory-per-rank")
        ->group("[kpipe-sim]");
    app.add_flag("--memory", o.memory, "print every rank's predicted memory and step time for this configuration")
        ->group("[kpipe-sim]");
    app.add_option("--ranks", o.ranks, "ranks to lay the model out on")->group("[kpipe-sim]");
    app.add_option("--memory-per-rank", o.memory_per_rank, "memory budget of each rank (512MiB, 6GiB, 2e9)")
        ->group("[kpipe-sim]");
    app.add_option("--top", o.top, "layouts to print")->group("[kpipe-sim]")->capture_default_str();
    app.add_option("--profile", o.profile, "layer times measured by kpipe-train --output.profile FILE")
        ->group("[kpipe-sim]");
    app.add_option("--gpu", o.gpu, "without --profile: layer times from the work ledger's roofline on this GPU "
                                   "(h100, h200)")
        ->group("[kpipe-sim]");
    app.add_option("--flops-per-second", o.machine.flops_per_second, "compute rate per rank without a profile")
        ->check(a_rate)->group("[kpipe-sim]")->capture_default_str();
    app.add_option("--latency", o.machine.latency, "seconds per message")
        ->check(non_negative)->group("[kpipe-sim]")->capture_default_str();
    app.add_option("--bandwidth", o.machine.bytes_per_second, "bytes per second per link")
        ->check(a_rate)->group("[kpipe-sim]")->capture_default_str();
    app.footer(exit_codes_help(ProgramName::sim));
  });
  if (command.exit_now) return command.exit_code;
  require(o.recommend != o.memory, "--recommend and --memory: give one of them");
  require(o.gpu.empty() || model::gpu_spec(o.gpu).has_value(), "--gpu = {}: expected one of {}", o.gpu,
          fmt::join(model::gpu_names(), ", "));
  require(o.gpu.empty() || o.profile.empty(), "--gpu = '{}' and --profile = '{}': give one of them", o.gpu,
          o.profile);
  return o.recommend ? run_recommend(command.config, o, model_arguments(argc, argv)) : run_memory(command.config, o);
}

// Spellings kpipe-sim no longer takes, each answered with one line naming the one it takes now (every mode).
std::string old_spelling(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--per-byte" || a.rfind("--per-byte=", 0) == 0)
      return "--per-byte is --bandwidth now, in bytes per time unit (1 / per-byte), as --memory and --recommend "
             "take it";
    // --vertical-sync was a flag here; kpipe-train's takes 0 or 1.
    if (a == "--vertical-sync" && (i + 1 == argc || argv[i + 1][0] == '-'))
      return "--vertical-sync takes a value, as kpipe-train's: --vertical-sync 1";
  }
  return "";
}

int sim_main(int argc, char** argv) {
  if (const std::string old = old_spelling(argc, argv); !old.empty()) {
    std::fprintf(stderr, "kpipe-sim: error: %s\n", old.c_str());
    return kpipe::exit_status(kpipe::ExitCode::bad_input);
  }
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--kernels") return kpipe::apps::sim_kernels_main(argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--recommend" || std::string(argv[i]) == "--memory") {
      try {
        return plan_main(argc, argv);
      } catch (const kpipe::InputError& e) {
        std::fprintf(stderr, "kpipe-sim: error: %s\n", e.what());
        return kpipe::exit_status(kpipe::ExitCode::bad_input);
      }
    }
  Options o;
  CLI::App app{"kpipe-sim: generate or read a pipeline schedule, validate it, simulate one step and show its timeline"};
  app.add_option("--schedule", o.schedule_name, "naive | gpipe | 1f1b | interleaved | zb-h1 | zb-v | pipedream | 2bw")
      ->capture_default_str();
  app.add_option("--vertical-sync", o.vertical_sync, "pipedream: 1, a micro-batch reads, on every stage, stage 0's version")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "pipedream, 2bw: steps to simulate (default: warm-up, steady state, drain)")
      ->check(at_least_one);
  app.add_option("--stages", o.stages, "pipeline ranks p")->check(at_least_one)->capture_default_str();
  app.add_option("--microbatches", o.microbatches, "micro-batches m per step")->check(at_least_one)->capture_default_str();
  app.add_option("--chunks", o.chunks, "model chunks v per rank (interleaved; zb-v: 2)")->check(at_least_one)->capture_default_str();
  app.add_flag("--split-backward", o.split, "replace every B by I then W");
  app.add_option("--schedule-file", o.schedule_file, "a schedule in text form (docs/schedules.md) instead of --schedule");
  app.add_option("--cost-f", o.costs.f, "time of a forward, per micro-batch and chunk")->check(non_negative)->capture_default_str();
  app.add_option("--cost-b", o.costs.b, "time of a full backward")->check(non_negative)->capture_default_str();
  app.add_option("--cost-i", o.costs.i, "time of an input-gradient backward (I)")->check(non_negative)->capture_default_str();
  app.add_option("--cost-w", o.costs.w, "time of a weight-gradient backward (W)")->check(non_negative)->capture_default_str();
  app.add_option("--cost-r", o.costs.r, "time of recomputing a micro-batch's dropped activations, paid by every B and I")
      ->check(non_negative)->capture_default_str();
  app.add_option("--cost-step", o.costs.step, "time of the optimizer step")->check(non_negative)->capture_default_str();
  app.add_option("--latency", o.costs.latency, "time from a send to its arrival")->check(non_negative)->capture_default_str();
  app.add_option("--bandwidth", o.bandwidth, "bytes per time unit over a link (default: unlimited)")->check(a_rate);
  app.add_option("--activation-bytes", o.costs.activation_bytes, "bytes of one activation message")
      ->check(non_negative)->capture_default_str();
  app.add_option("--replicas", o.replicas, "data-parallel replicas of the schedule, side by side")
      ->check(at_least_one)->capture_default_str();
  app.add_option("--dp-group", o.dp_group, "ordered reduction: consecutive micro-batches per hop of the running sum")
      ->check(at_least_one)->capture_default_str();
  app.add_flag("--allreduce", o.allreduce, "replicas reduce by allreduce after their lists (not ordered)");
  app.add_option("--gradient-bytes", o.costs.gradient_bytes, "bytes of a chunk's weight gradients (the running sum)")
      ->check(non_negative)->capture_default_str();
  app.add_option("--preset", o.preset, "costs from this model's FLOPs: tiny, small or bench (partitioned over the stages)");
  app.add_option("--vocab", o.vocab, "with --preset: its vocabulary (e.g. a BPE model's 8192)")->check(at_least_one);
  app.add_option("--partition", o.partition_name, "with --preset: uniform or balanced")->capture_default_str();
  app.add_option("--recompute", o.recompute_name, "with --preset: none, attention, mlp or block (its cost from the FLOPs)")
      ->capture_default_str();
  app.add_option("--precision", o.precision_name,
                 "with --preset: fp32, tf32 or bf16; a message's bytes (--activation-bytes: unless given)")
      ->capture_default_str();
  app.add_option("--sequences", o.sequences, "with --preset: sequences per micro-batch")->check(at_least_one)
      ->capture_default_str();
  app.add_option("--transport", o.transport_name,
                 "auto | mpi | nccl: the delivery planned for (nccl: stream-ordered, the lists NCCL runs; auto: as mpi)")
      ->capture_default_str();
  app.add_flag("--print-schedule", o.print_schedule, "print the schedule in text form");
  app.add_flag("--lowered", o.lowered, "with --print-schedule: include the sends and receives");
  app.add_flag("--no-gantt", o.no_gantt, "leave out the text Gantt chart");
  app.add_option("--width", o.width, "most columns of the Gantt chart (0: no limit)")
      ->check(non_negative)->capture_default_str();
  app.add_option("--svg", o.svg, "draw the timeline into this SVG file");
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::sim));
  try {
    app.parse(argc, argv);
    return run(o, app);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kpipe-sim: error: %s\n", e.what());
    return kpipe::exit_status(kpipe::ExitCode::bad_input);
  } catch (const kpipe::InputError& e) {
    std::fprintf(stderr, "kpipe-sim: error: %s\n", in_option_terms(e.what()).c_str());
    return kpipe::exit_status(kpipe::ExitCode::bad_input);
  }
}
}  // namespace

int main(int argc, char** argv) {
  return kpipe::apps::run_program(kpipe::ProgramName::sim, "kpipe-sim", [&] { return sim_main(argc, argv); });
}
