#pragma once
// The bubble, defined once for every figure kpipe prints of it: the simulator's, kpipe-train's measured one
// (its report and the final metrics) and kpipe-inspect's from a timeline. A rank's bubble is the share of the
// pipeline's time it does not compute: 1 - busy / makespan, where busy is its compute time (F, B, I, W, and an
// asynchronous schedule's updates) and the makespan is the longest rank's span, since a rank that finishes
// early still waits for the step's last backward. Over several steps both are summed first.
#include <algorithm>
#include <vector>

#include "kpipe/schedule/interpret.hpp"

namespace kpipe::schedule {

// One rank's time over the steps counted.
struct RankTime {
  double busy = 0;  // computing
  double span = 0;  // from the start of each step's lists to the end of the rank's last action in it
};

// Adds one step of a rank's timeline: every action it ran, messages included, each with .action, .start and .end
// in seconds since the rank began the step's lists (the executor's TimedAction, a timeline file's row, a Span).
template <class Actions> void add_step(RankTime& time, const Actions& actions) {
  double end = 0;
  for (const auto& a : actions) {
    if (is_compute(a.action.op) || a.action.op == Op::update) time.busy += a.end - a.start;
    end = std::max(end, a.end);
  }
  time.span += end;
}

// Per rank of one pipeline: 1 - busy / the longest span (0 for a pipeline that took no time).
std::vector<double> idle_fractions(const std::vector<RankTime>& pipeline);

// Their mean: the figure printed beside the simulator's.
double mean_bubble(const std::vector<double>& idle_fractions);

}  // namespace kpipe::schedule
