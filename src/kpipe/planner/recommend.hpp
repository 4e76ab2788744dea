#pragma once
// kpipe-sim recommend: the layouts of a model on N ranks that fit a per-rank memory budget, fastest first.
// It tries every pipeline size p dividing N (data-parallel d = N / p), every schedule (gpipe, 1f1b, zb-h1,
// interleaved with 2 to 4 chunks, zb-v), every micro-batch count the batch allows (divisors of train.batch,
// multiples of d, at most 256), every recomputation mode and both partitions; for each it plans every rank's
// memory (memory/plan.hpp, exact for what kpipe-train allocates) and simulates a step of its schedule with
// the step-time model (costs.hpp). Other keys (the reduction, its group, the optimizer) are the base
// configuration's.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/planner/costs.hpp"

namespace kpipe::planner {

struct Candidate {
  Config config;             // the base with the layout applied
  double step_seconds = 0;   // predicted (the simulated makespan of one step, optimizer included)
  double bubble = 0;         // predicted mean idle fraction
  std::int64_t memory = 0;   // the most any rank needs
  int heaviest_rank = 0;
};

struct Search {
  int ranks = 1;
  std::int64_t memory_per_rank = 0;
  int top = 5;
  Machine machine;
};

struct Recommendation {
  std::vector<Candidate> best;       // fitting, fastest first, at most top
  int layouts = 0, fitting = 0;      // evaluated, and how many fit
  std::optional<Candidate> leanest;  // the layout needing the least memory per rank (of all evaluated)
  // When none fits: the fewest ranks (2, 4, 8 times as many) with a layout that fits, and its leanest layout;
  // when none of those fits either, the most ranks tried and its leanest layout.
  std::optional<int> ranks_needed;
  std::optional<Candidate> leanest_there;
};

Recommendation recommend(const Config& base, const Search& search);

// The kpipe-train command line of a candidate on `ranks` ranks: mpiexec -n N kpipe-train, the user's own
// model arguments, then the layout's keys and the memory limit.
std::string command_line(const Candidate& candidate, int ranks, const std::vector<std::string>& model_arguments,
                         const std::string& memory_per_rank);

// "p2 x d1 1f1b m=8 recompute=block partition=balanced"
std::string layout_name(const Config& config);

}  // namespace kpipe::planner
