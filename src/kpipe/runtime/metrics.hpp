#pragma once
// Metrics as JSON Lines, one object per line, each of one kind: a step's ("step", "loss", ..., "step_seconds"),
// a periodic validation's ("validation": true), a checkpoint written ("checkpoint": its file), and at the end one
// with "final": true, or instead one with "silent_corruption": true, whose "exclude" a batch script reads
// (scripts/slurm). Steps are numbered from 1 (core/step_number.hpp). Floats are written with 17 significant
// digits, so a loss read back is the exact double that was computed.
#include <cstdint>
#include <fstream>
#include <string>

#include <vector>

#include "kpipe/core/memory_category.hpp"
#include "kpipe/runtime/replica_check.hpp"
#include "kpipe/runtime/step_stats.hpp"

namespace kpipe::runtime {

struct FinalMetrics {
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // steps whose update was skipped (a non-finite loss or gradient)
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
  // An empty path writes nothing. The file is truncated. A line that cannot be written (a full disk) throws
  // std::runtime_error naming the file: the run stops rather than lose its figures unseen.
  explicit MetricsWriter(const std::string& path);
  void write_step(const StepStats& stats);
  // {"validation": true, "step": N, "val_loss": ...}: train.eval_every's loss after step N.
  void write_validation(std::int64_t step, double val_loss);
  // {"checkpoint": FILE, "step": N, "seconds": ...}: the checkpoint of step N, published, and how long the
  // training waited for it.
  void write_checkpoint(std::int64_t step, const std::string& file, double seconds);
  void write_final(const FinalMetrics& final);
  // What a check found (runtime/replica_check.hpp): the line, the ranks and nodes, and "exclude": the nodes
  // joined by commas, as sbatch --exclude takes them.
  void write_corruption(const SilentCorruption& corruption);

 private:
  void write(const std::string& line);

  std::string path_;
  std::ofstream out_;
};

// "0123456789abcdef": how a checksum is printed everywhere.
std::string checksum_hex(std::uint64_t checksum);

}  // namespace kpipe::runtime
