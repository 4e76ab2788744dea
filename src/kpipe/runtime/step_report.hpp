#pragma once
// What a step reports, summed over the world in one allreduce of doubles with every rank's share: each
// micro-batch's loss sum by slot (it lives on one rank, zeros elsewhere: the world's sum is exact), the stop
// votes (signals.hpp), the checkpoint writes still under way and what the update policy adds. pack() and unpack() are the one place that knows where
// each lies in the sum.
#include <array>
#include <vector>

namespace kpipe::runtime {

struct StepReport {
  std::vector<double> losses;          // per loss slot (train.microbatches)
  std::array<double, 2> stop_votes{};  // stop_votes(signal) on each rank
  // Asynchronous schedules: the squared norm of every stage's last update (replica 0's); 0 for a flush, whose
  // optimizer step computes its norm after the sum.
  double update_squares = 0;
  double checkpoint_writes = 0;  // 1 on each rank whose checkpoint write beside the training is still under way

  double loss_sum() const;  // the slots added in order: the same sum on every layout
  std::vector<double> pack() const;
  static StepReport unpack(const std::vector<double>& sums);
};

}  // namespace kpipe::runtime
