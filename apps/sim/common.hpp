#pragma once
// What kpipe-sim's subcommands share: each reads a training configuration through the one parser (every key
// of kpipe-train, spelled and defaulted as there) plus options of its own, and those that price a step take
// the one cost model's machine (planner/costs.hpp) through the same options with the same defaults.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "kpipe/core/config_io.hpp"
#include "kpipe/planner/costs.hpp"
#include "kpipe/schedule/plan.hpp"

namespace kpipe::apps::sim {

// Each subcommand's whole program: argv[0] is the subcommand ("schedule"); the exit code, or an InputError.
int schedule_main(int argc, char** argv);
int memory_main(int argc, char** argv);
int recommend_main(int argc, char** argv);
int kernels_main(int argc, char** argv);

struct Subcommand {
  const char* name;
  const char* summary;  // one line of kpipe-sim --help
  int (*main)(int argc, char** argv);
};
// The four, in the order kpipe-sim --help lists them.
const std::vector<Subcommand>& subcommands();

// An option's check: a number from `low` to `high`, else "<text> is not a number from <range>" (one line).
CLI::Validator number_in(double low, double high, const std::string& range);

// The machine a step is priced on, as options: the link (--latency, --bandwidth) and how layer times are
// found (--flops-per-second, --gpu, --profile).
struct MachineOptions {
  planner::Machine machine;
  std::string gpu, profile;
};
// Adds them to a subcommand's options, in a group of its own (`program`: "kpipe-sim schedule").
void add_machine_options(CLI::App& app, MachineOptions& o, const std::string& program);
// The machine they give: InputError (one line) for an unknown GPU, or --gpu with --profile.
planner::Machine machine_of(const MachineOptions& o);
// "model FLOPs at 1e+11 FLOP/s per rank", or the profile or GPU the layer times come from.
std::string costs_source(const MachineOptions& o);

// Parses a subcommand's command line: the configuration's keys and the options `extra` adds, --help with
// `what` (one line) above the keys and the exit codes below them.
CommandLine parse_subcommand(int argc, char** argv, const std::string& what, const ExtraOptions& extra,
                             const BeforeValidation& before_validation = {});

// A spelling kpipe-sim no longer takes (a mode flag, or an option renamed to kpipe-train's key) anywhere in
// argv: one line naming the spelling it takes now; "" if none.
std::string old_spelling(int argc, char** argv);

std::string percent(double fraction);
// "passes: ...; buffered delivery, gradient sums ..." on one line.
void print_passes(const schedule::Plan& plan);

}  // namespace kpipe::apps::sim
