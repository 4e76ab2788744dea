#include "common.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <utility>

#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/model/roofline.hpp"

namespace kpipe::apps::sim {
namespace {

// What each old spelling is now. The modes were flags; schedule mode's own options shadowed kpipe-train's keys.
const std::pair<const char*, const char*> renamed[] = {
    {"--recommend", "--recommend is a subcommand now: kpipe-sim recommend [options]"},
    {"--memory", "--memory is a subcommand now: kpipe-sim memory [options]"},
    {"--kernels", "--kernels is a subcommand now: kpipe-sim kernels [options]"},
    {"--stages", "--stages is --pipeline-size now (pipeline.pipeline_size), in kpipe-sim schedule"},
    {"--replicas", "--replicas is --data-parallel now (pipeline.data_parallel), and --microbatches counts every "
                   "replica's, as in kpipe-train"},
    {"--dp-group", "--dp-group is --pipeline.dp_reduction_group now"},
    {"--allreduce", "--allreduce is --pipeline.dp_reduction allreduce now"},
    {"--partition", "--partition is --pipeline.partition now"},
    {"--vocab", "--vocab is --model.vocab now"},
    {"--sequences", "--sequences is --batch now: a micro-batch holds train.batch / train.microbatches sequences"},
    {"--per-byte", "--per-byte is --bandwidth now, in bytes per second (1 / per-byte)"},
};

}  // namespace

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

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> all = {
      {"schedule", "plan, validate and simulate a schedule: Gantt chart, bubble, makespan, peak stash, SVG",
       &schedule_main},
      {"memory", "every rank's predicted memory by category, and the step time, of a training configuration",
       &memory_main},
      {"recommend", "the fastest layouts of a model on --ranks ranks that fit --memory-per-rank", &recommend_main},
      {"kernels", "each kernel of one micro-batch on a GPU with its roofline bound (table or CSV)", &kernels_main},
  };
  return all;
}

void add_machine_options(CLI::App& app, MachineOptions& o, const std::string& program) {
  const CLI::Validator non_negative = number_in(0, 1e15, "0 to 1e15"), a_rate = number_in(1, 1e21, "1 to 1e21");
  const std::string group = "[" + program + ": the machine]";
  app.add_option("--latency", o.machine.latency, "seconds from a send to its arrival")
      ->check(non_negative)->group(group)->capture_default_str();
  app.add_option("--bandwidth", o.machine.bytes_per_second, "bytes per second over a link")
      ->check(a_rate)->group(group)->capture_default_str();
  app.add_option("--flops-per-second", o.machine.flops_per_second,
                 "a rank's compute rate, for layer times from the model's FLOPs (without --gpu or --profile)")
      ->check(a_rate)->group(group)->capture_default_str();
  app.add_option("--gpu", o.gpu, "layer times from the work ledger's roofline on this GPU: " +
                                     fmt::format("{}", fmt::join(model::gpu_names(), ", ")))
      ->group(group);
  app.add_option("--profile", o.profile, "layer times measured by kpipe-train --output.profile FILE")->group(group);
}

planner::Machine machine_of(const MachineOptions& o) {
  require(o.gpu.empty() || model::gpu_spec(o.gpu).has_value(), "--gpu = {}: expected one of {}", o.gpu,
          fmt::join(model::gpu_names(), ", "));
  require(o.gpu.empty() || o.profile.empty(), "--gpu = '{}' and --profile = '{}': give one of them", o.gpu,
          o.profile);
  planner::Machine m = o.machine;
  if (!o.profile.empty()) m.profile = planner::read_profile(o.profile);
  if (!o.gpu.empty()) m.gpu = model::gpu_spec(o.gpu);
  return m;
}

std::string costs_source(const MachineOptions& o) {
  if (!o.profile.empty()) return fmt::format("layer times measured in {}", o.profile);
  if (!o.gpu.empty()) return fmt::format("layer times from the work ledger's roofline on an {}", o.gpu);
  return fmt::format("model FLOPs at {:g} FLOP/s per rank", o.machine.flops_per_second);
}

CommandLine parse_subcommand(int argc, char** argv, const std::string& what, const ExtraOptions& extra,
                             const BeforeValidation& before_validation) {
  return parse_command_line(
      fmt::format("kpipe-sim {}", argv[0]), argc, argv,
      [&](CLI::App& app) {
        app.description(what + "\n" + app.get_description());
        app.footer(exit_codes_help(ProgramName::sim));
        extra(app);
      },
      before_validation);
}

std::string old_spelling(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i], name = a.substr(0, a.find('='));
    for (const auto& [old, now] : renamed)
      if (name == old) return now;
    // --vertical-sync was a flag in kpipe-sim; kpipe-train's takes 0 or 1.
    if (a == "--vertical-sync" && (i + 1 == argc || argv[i + 1][0] == '-'))
      return "--vertical-sync takes a value, as kpipe-train's: --vertical-sync 1";
  }
  return "";
}

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

void print_passes(const schedule::Plan& plan) {
  std::printf("passes: %s; %s delivery%s\n", schedule::passes_text(plan).c_str(),
              std::string(to_string(plan.delivery)).c_str(),
              plan.sums == schedule::SumRoute::none ? "" : fmt::format(", gradient sums {}", plan.sums).c_str());
}

}  // namespace kpipe::apps::sim
