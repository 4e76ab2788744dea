#pragma once
// Metrics as JSON Lines: one object per optimizer step, then one with "final": true. Floats are written
// with 17 significant digits, so a loss read back is the exact double that was computed.
#include <cstdint>
#include <fstream>
#include <string>

#include <vector>

#include "kpipe/core/memory_category.hpp"
#include "kpipe/runtime/step_stats.hpp"

namespace kpipe::runtime {

struct FinalMetrics {
  std::int64_t steps = 0;
  double val_loss = 0;
  std::uint64_t param_checksum = 0;
  double seconds = 0;
  double tokens_per_s = 0;         // the whole run's: every token over the run's wall time, first step included
  double steady_tokens_per_s = 0;  // the median step's after the first (runs of one step: that step's)
  std::int64_t num_params = 0;
  double measured_bubble = 0;   // mean over pipeline ranks, steps after the first
  double simulated_bubble = 0;  // the simulator's, with this run's measured action costs
  std::vector<memory::Bytes> memory_predicted, memory_measured;  // per world rank, by category
};

class MetricsWriter {
 public:
  // An empty path writes nothing. The file is truncated.
  explicit MetricsWriter(const std::string& path);
  void write_step(const StepStats& stats);
  void write_final(const FinalMetrics& final);

 private:
  std::ofstream out_;
};

// "0123456789abcdef": how a checksum is printed everywhere.
std::string checksum_hex(std::uint64_t checksum);

}  // namespace kpipe::runtime
