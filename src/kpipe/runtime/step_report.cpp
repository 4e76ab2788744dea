#include "kpipe/runtime/step_report.hpp"

#include <stdexcept>

namespace kpipe::runtime {

namespace {

constexpr std::size_t after_losses = 4;  // the two stop votes, the update's squares, the checkpoint writes

}  // namespace

double StepReport::loss_sum() const {
  double sum = 0;
  for (const double loss : losses) sum += loss;
  return sum;
}

std::vector<double> StepReport::pack() const {
  std::vector<double> sums(losses);
  sums.insert(sums.end(), {stop_votes[0], stop_votes[1], update_squares, checkpoint_writes});
  return sums;
}

StepReport StepReport::unpack(const std::vector<double>& sums) {
  if (sums.size() < after_losses) throw std::invalid_argument("StepReport::unpack: not a packed report");
  const auto votes = sums.end() - after_losses;
  StepReport report;
  report.losses.assign(sums.begin(), votes);
  report.stop_votes = {votes[0], votes[1]};
  report.update_squares = votes[2];
  report.checkpoint_writes = votes[3];
  return report;
}

}  // namespace kpipe::runtime
