// kpipe-sim recommend: the layouts of a model on --ranks ranks that fit --memory-per-rank, fastest first
// (planner/recommend.hpp), each with the kpipe-train command line that runs it; when none fits, what would.
//   kpipe-sim recommend --ranks 4 --memory-per-rank 6GiB [--profile layers.toml | --gpu h200] [model options]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "kpipe/core/bytes.hpp"
#include "kpipe/planner/recommend.hpp"

namespace kpipe::apps::sim {
namespace {

struct SearchOptions {
  int ranks = 0, top = 5;
  std::string memory_per_rank;
  MachineOptions machine;
};

// The keys a recommendation sets (with their short spellings): the user's own values for them are dropped.
const std::vector<std::string> layout_options = {
    "--pipeline.pipeline_size", "--pipeline-size", "--pipeline.data_parallel", "--data-parallel",
    "--pipeline.schedule",      "--schedule",      "--pipeline.chunks",        "--chunks",
    "--train.microbatches",     "--microbatches",  "--memory.recompute",       "--recompute",
    "--pipeline.partition",     "--memory.limit_per_rank", "--memory-limit-per-rank", "--pipeline.schedule_file",
    "--schedule-file"};

// The user's configuration options, to repeat on every recommended kpipe-train command line: argv less this
// subcommand's own options (`own`) and the layout's.
std::vector<std::string> model_arguments(int argc, char** argv, const std::vector<std::string>& own) {
  std::vector<std::string> kept;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i], name = a.substr(0, a.find('='));
    if (std::find(own.begin(), own.end(), name) != own.end() ||
        std::find(layout_options.begin(), layout_options.end(), name) != layout_options.end()) {
      if (name == a) ++i;  // its value follows
      continue;
    }
    kept.push_back(a.find(' ') == std::string::npos ? a : "'" + a + "'");
  }
  return kept;
}

}  // namespace

int recommend_main(int argc, char** argv) {
  SearchOptions o;
  std::vector<std::string> own;  // this subcommand's options (its group's and the machine's), as spelled
  const auto command = parse_subcommand(
      argc, argv, "kpipe-sim recommend: the fastest layouts of the model on --ranks ranks that fit --memory-per-rank",
      [&](CLI::App& app) {
        app.add_option("--ranks", o.ranks, "ranks to lay the model out on")->group("[kpipe-sim recommend]");
        app.add_option("--memory-per-rank", o.memory_per_rank, "memory budget of each rank (512MiB, 6GiB, 2e9)")
            ->group("[kpipe-sim recommend]");
        app.add_option("--top", o.top, "layouts to print")->group("[kpipe-sim recommend]")->capture_default_str();
        add_machine_options(app, o.machine, "kpipe-sim recommend");
        for (const CLI::Option* option : app.get_options())
          if (option->get_group().rfind("[kpipe-sim recommend", 0) == 0) own.push_back(option->get_name());
      });
  if (command.exit_now) return command.exit_code;
  const Config& config = command.config;
  require(o.ranks >= 1, "--ranks = {}: the number of ranks to lay the model out on (at least 1)", o.ranks);
  const auto budget = parse_bytes(o.memory_per_rank);
  require(budget.has_value() && *budget > 0, "--memory-per-rank = '{}': expected a size such as 512MiB, 6GiB, 2e9",
          o.memory_per_rank);
  planner::Search search;
  search.ranks = o.ranks;
  search.memory_per_rank = *budget;
  search.top = o.top;
  search.machine = machine_of(o.machine);
  const auto model_args = model_arguments(argc, argv, own);
  const auto r = planner::recommend(config, search);
  const auto desc = model::describe(config.model);
  std::printf("model: %lld parameters, %d layers, d_model %d, seq_len %d, batch %d; costs: %s\n",
              static_cast<long long>(desc.num_params()), config.model.n_layers, config.model.d_model,
              config.model.seq_len, config.train.batch, costs_source(o.machine).c_str());
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

}  // namespace kpipe::apps::sim
