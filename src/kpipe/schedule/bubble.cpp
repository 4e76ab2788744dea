#include "kpipe/schedule/bubble.hpp"

#include <algorithm>

namespace kpipe::schedule {

std::vector<double> idle_fractions(const std::vector<RankTime>& pipeline) {
  double makespan = 0;
  for (const RankTime& rank : pipeline) makespan = std::max(makespan, rank.span);
  std::vector<double> idle;
  for (const RankTime& rank : pipeline) idle.push_back(makespan > 0 ? 1.0 - rank.busy / makespan : 0.0);
  return idle;
}

double mean_bubble(const std::vector<double>& idle_fractions) {
  double sum = 0;
  for (const double f : idle_fractions) sum += f;
  return idle_fractions.empty() ? 0.0 : sum / double(idle_fractions.size());
}

}  // namespace kpipe::schedule
