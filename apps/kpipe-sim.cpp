// kpipe-sim: a pipeline schedule without MPI. Generates (or reads) a schedule, validates it, simulates one
// step and prints the per-rank timeline as a text Gantt chart, the bubble per rank and overall, the makespan
// and the peak activation stash; optionally the schedule itself and an SVG drawing of the timeline.
//   kpipe-sim --schedule 1f1b --stages 4 --microbatches 8
//   kpipe-sim --schedule interleaved --stages 4 --microbatches 8 --chunks 2 --cost-f 0.5 --cost-b 1 --svg t.svg
//   kpipe-sim --schedule-file my.sched --print-schedule
//   kpipe-sim --schedule 1f1b --stages 4 --preset small --vocab 8192 --partition balanced
// With --preset, each stage's costs come from the partitioned model's FLOPs (GFLOP per micro-batch of
// --sequences sequences), so the embedding and the LM head weigh what they weigh.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/partition/stage_costs.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/render.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace {

using namespace kpipe;
using namespace kpipe::schedule;

struct Options {
  std::string schedule = "1f1b";
  int stages = 4, microbatches = 8, chunks = 1;
  bool split = false;
  std::string schedule_file;
  Costs costs;
  bool print_schedule = false, lowered = false, no_gantt = false;
  std::string svg;
  int width = 160;
  std::string preset, partition = "balanced";  // --preset: costs from the model
  int vocab = 0, sequences = 1;
};

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

std::string plural(int n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

Schedule make_schedule(const Options& o, const CLI::App& app) {
  if (o.schedule_file.empty()) {
    Schedule s = generate(o.schedule, o.stages, o.microbatches, o.chunks);
    return o.split ? split_backward(s) : s;
  }
  require(app.count("--schedule") == 0, "--schedule and --schedule-file: give one of them");
  Schedule s = read_schedule_file(o.schedule_file, 0, app.count("--chunks") ? o.chunks : 0);
  // Sizes given on the command line must agree with the file's.
  require(!app.count("--stages") || o.stages == s.ranks, "--stages = {}: the schedule file has {} ranks (lines)",
          o.stages, s.ranks);
  require(!app.count("--microbatches") || o.microbatches == s.microbatches,
          "--microbatches = {}: the schedule file has {} micro-batches", o.microbatches, s.microbatches);
  return o.split ? split_backward(s) : s;
}

// Option checks whose messages read as one line ("--stages: 0 is not a positive integer").
const CLI::Validator at_least_one(
    [](std::string& text) {
      int value = 0;
      return CLI::detail::lexical_cast(text, value) && value >= 1 ? "" : text + " is not a positive integer";
    },
    "");
const CLI::Validator non_negative(
    [](std::string& text) {
      double value = 0;
      return CLI::detail::lexical_cast(text, value) && value >= 0 ? "" : text + " is not a non-negative number";
    },
    "");

// The library names configuration keys; here the user typed options.
std::string in_option_terms(std::string message) {
  const std::pair<const char*, const char*> names[] = {{"pipeline.schedule_file", "--schedule-file"},
                                                       {"pipeline.schedule ", "--schedule "},
                                                       {"pipeline.pipeline_size", "--stages"},
                                                       {"train.microbatches", "--microbatches"},
                                                       {"pipeline.chunks", "--chunks"}};
  for (const auto& [key, option] : names)
    for (auto at = message.find(key); at != std::string::npos; at = message.find(key, at))
      message.replace(at, std::string(key).size(), option);
  return message;
}

// Per virtual stage, from the model's FLOPs; prints the partition and what each stage holds.
std::vector<Costs> model_costs(const Options& o, const Schedule& s) {
  ModelConfig model = preset(o.preset).model;
  if (o.vocab > 0) model.vocab = o.vocab;
  const model::ModelDesc desc = model::describe(model);
  const partition::InFlight in_flight{peak_stash(s), o.sequences};
  const auto ranges = partition::partition_layers(desc, s.ranks, s.chunks, o.partition, in_flight);
  const auto costs = partition::stage_costs(desc, ranges, o.sequences, o.costs);
  const auto memory = partition::stage_memory(partition::layer_memory(desc, s.ranks, s.chunks, in_flight), ranges);
  std::printf("model %s: %d blocks, d_model %d, seq_len %d, vocabulary %d; %s partition, %d sequence%s per "
              "micro-batch\n", o.preset.c_str(), model.n_layers, model.d_model, model.seq_len, model.vocab,
              o.partition.c_str(), o.sequences, o.sequences == 1 ? "" : "s");
  std::printf("%-6s %-5s %-10s %10s %10s %12s\n", "stage", "rank", "layers", "F GFLOP", "B GFLOP", "memory MB");
  for (std::size_t k = 0; k < ranges.size(); ++k)
    std::printf("%-6zu %-5d %-10s %10.4g %10.4g %12.1f\n", k, s.rank_of(int(k)),
                fmt::format("{}-{}", ranges[k].first, ranges[k].last - 1).c_str(), costs[k].f, costs[k].b,
                memory[k] * 4 / 1e6);  // float32 scalars
  return costs;
}

int run(const Options& o, const CLI::App& app) {
  const Schedule s = make_schedule(o, app);
  validate(s);
  const bool from_model = !o.preset.empty();
  require(from_model || (app.count("--vocab") == 0 && app.count("--partition") == 0 && app.count("--sequences") == 0),
          "--vocab, --partition and --sequences need --preset (costs from a model)");
  const SimResult sim = from_model ? simulate(s, model_costs(o, s)) : simulate(s, o.costs);
  const std::string name = o.schedule_file.empty() ? o.schedule + (o.split ? " (split backward)" : "") : o.schedule_file;

  std::printf("schedule %s: %s, %s, %s\n", name.c_str(), plural(s.ranks, "rank", "ranks").c_str(),
              plural(s.microbatches, "micro-batch", "micro-batches").c_str(), plural(s.chunks, "chunk", "chunks").c_str());
  const Costs& c = o.costs;
  if (from_model)
    std::printf("costs per stage from the model (GFLOP, above); step=%g latency=%g per_byte=%g activation_bytes=%g\n",
                c.step, c.latency, c.per_byte, c.activation_bytes);
  else
    std::printf("costs per chunk: f=%g b=%g i=%g w=%g step=%g latency=%g per_byte=%g activation_bytes=%g\n", c.f,
                c.b, c.i, c.w, c.step, c.latency, c.per_byte, c.activation_bytes);
  if (o.print_schedule) {
    std::printf("\n%s", to_text(o.lowered ? lower(s) : s).c_str());
  }
  if (!o.no_gantt) {
    GanttOptions gantt;
    gantt.max_width = o.width;
    std::printf("\n%s", gantt_text(sim.timeline, s.chunks, gantt).c_str());
  }
  std::printf("\n%-6s %10s %10s %8s %11s\n", "rank", "busy", "idle", "bubble", "peak stash");
  for (int r = 0; r < s.ranks; ++r)
    std::printf("%-6d %10.4g %10.4g %8s %11d\n", r, sim.busy[r], sim.makespan - sim.busy[r],
                percent(sim.idle_fraction[r]).c_str(), sim.peak_stash[r]);
  std::printf("makespan %.6g, bubble %s (mean idle fraction)\n", sim.makespan, percent(sim.bubble).c_str());

  if (!o.svg.empty()) {
    SvgOptions svg;
    svg.title = fmt::format("{}: p = {}, m = {}{}; makespan {:.4g}, bubble {}", name, s.ranks, s.microbatches,
                            s.chunks > 1 ? fmt::format(", v = {}", s.chunks) : "", sim.makespan, percent(sim.bubble));
    std::ofstream out(o.svg);
    require(bool(out), "--svg = '{}': cannot write", o.svg);
    out << timeline_svg(sim.timeline, s.chunks, svg);
    out.close();
    require(bool(out), "--svg = '{}': cannot write", o.svg);
    std::printf("timeline drawn in %s\n", o.svg.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kpipe-sim: generate or read a pipeline schedule, validate it, simulate one step and show its timeline"};
  app.add_option("--schedule", o.schedule, "naive | gpipe | 1f1b | interleaved | zb-h1")->capture_default_str();
  app.add_option("--stages", o.stages, "pipeline ranks p")->check(at_least_one)->capture_default_str();
  app.add_option("--microbatches", o.microbatches, "micro-batches m per step")->check(at_least_one)->capture_default_str();
  app.add_option("--chunks", o.chunks, "model chunks v per rank (interleaved)")->check(at_least_one)->capture_default_str();
  app.add_flag("--split-backward", o.split, "replace every B by I then W");
  app.add_option("--schedule-file", o.schedule_file, "a schedule in text form (docs/schedules.md) instead of --schedule");
  app.add_option("--cost-f", o.costs.f, "time of a forward, per micro-batch and chunk")->check(non_negative)->capture_default_str();
  app.add_option("--cost-b", o.costs.b, "time of a full backward")->check(non_negative)->capture_default_str();
  app.add_option("--cost-i", o.costs.i, "time of an input-gradient backward (I)")->check(non_negative)->capture_default_str();
  app.add_option("--cost-w", o.costs.w, "time of a weight-gradient backward (W)")->check(non_negative)->capture_default_str();
  app.add_option("--cost-step", o.costs.step, "time of the optimizer step")->check(non_negative)->capture_default_str();
  app.add_option("--latency", o.costs.latency, "time from a send to its arrival")->check(non_negative)->capture_default_str();
  app.add_option("--per-byte", o.costs.per_byte, "transfer time per byte")->check(non_negative)->capture_default_str();
  app.add_option("--activation-bytes", o.costs.activation_bytes, "bytes of one activation message")
      ->check(non_negative)->capture_default_str();
  app.add_option("--preset", o.preset, "costs from this model's FLOPs: tiny, small or bench (partitioned over the stages)");
  app.add_option("--vocab", o.vocab, "with --preset: its vocabulary (e.g. a BPE model's 8192)")->check(at_least_one);
  app.add_option("--partition", o.partition, "with --preset: uniform or balanced")->capture_default_str();
  app.add_option("--sequences", o.sequences, "with --preset: sequences per micro-batch")->check(at_least_one)
      ->capture_default_str();
  app.add_flag("--print-schedule", o.print_schedule, "print the schedule in text form");
  app.add_flag("--lowered", o.lowered, "with --print-schedule: include the sends and receives");
  app.add_flag("--no-gantt", o.no_gantt, "leave out the text Gantt chart");
  app.add_option("--width", o.width, "most columns of the Gantt chart (0: no limit)")
      ->check(non_negative)->capture_default_str();
  app.add_option("--svg", o.svg, "draw the timeline into this SVG file");
  try {
    app.parse(argc, argv);
    return run(o, app);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kpipe-sim: error: %s\n", e.what());
    return kpipe::exit_bad_input;
  } catch (const kpipe::InputError& e) {
    std::fprintf(stderr, "kpipe-sim: error: %s\n", in_option_terms(e.what()).c_str());
    return kpipe::exit_bad_input;
  }
}
