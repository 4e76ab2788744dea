// kpipe-sim: a pipeline without MPI, as four subcommands (apps/sim/, one file each), every one reading a
// training configuration through kpipe-train's keys:
//   kpipe-sim schedule --schedule 1f1b --pipeline-size 4 --microbatches 8 --svg 1f1b.svg
//   kpipe-sim memory --preset bench --pipeline-size 2 --microbatches 8
//   kpipe-sim recommend --ranks 4 --memory-per-rank 6GiB --preset bench
//   kpipe-sim kernels --gpu h200 --preset bench
// `kpipe-sim --help` lists them, `kpipe-sim SUB --help` a subcommand's options. The modes' old spellings
// (--recommend, --memory, --kernels, and schedule mode's options renamed to kpipe-train's keys) are answered
// with one line naming the new one, exit 2, before any work.
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "program.hpp"
#include "sim/common.hpp"

namespace {

using kpipe::apps::sim::subcommands;

void print_help() {
  std::printf("kpipe-sim: a pipeline's schedule, memory, layouts and kernels, predicted without running it\n\n"
              "Usage: kpipe-sim SUBCOMMAND [OPTIONS]   (kpipe-sim SUBCOMMAND --help: its options)\n\n"
              "Subcommands:\n");
  for (const auto& sub : subcommands()) std::printf("  %-11s%s\n", sub.name, sub.summary);
  std::printf("\n%s\n", kpipe::exit_codes_help(kpipe::ProgramName::sim).c_str());
}

int sim_main(int argc, char** argv) {
  if (const std::string old = kpipe::apps::sim::old_spelling(argc - 1, argv + 1); !old.empty())
    throw kpipe::InputError(old);
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "--help" || first == "-h") {
    print_help();
    return 0;
  }
  for (const auto& sub : subcommands())
    if (first == sub.name) return sub.main(argc - 1, argv + 1);
  std::string names;
  for (const auto& sub : subcommands()) names += fmt::format("{}{}", names.empty() ? "" : ", ", sub.name);
  throw kpipe::InputError(first.empty() ? fmt::format("a subcommand first: {} (kpipe-sim --help)", names)
                                        : fmt::format("'{}' is no subcommand: expected one of {} (kpipe-sim --help)",
                                                      first, names));
}

}  // namespace

int main(int argc, char** argv) {
  return kpipe::apps::run_program(kpipe::ProgramName::sim, "kpipe-sim", [&] { return sim_main(argc, argv); });
}
