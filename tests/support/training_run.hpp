#pragma once
// One training run of the MPI tests on test::corpus() (or another corpus), and the bit-for-bit comparison of two runs: what every
// layout of the world must reproduce of one rank running the same micro-batches.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "kpipe/schedule/validate.hpp"
#include "support/corpus.hpp"

namespace kpipe::test {

struct TrainingRun {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::uint64_t checksum = 0;
  double val_loss = 0;
  int peak_stash = 0;                 // measured
  std::vector<int> predicted_stash;   // the validator's count, per rank
};

// A: what activations are stored in (float; bf16 for train.precision = bf16).
template <class A = float>
TrainingRun train(const Config& c, MPI_Comm comm, const runtime::TrainerOptions& options = {},
                  const data::Corpus& data = corpus()) {
  auto grid = comm::make_grid(comm, c.pipeline.pipeline_size, c.pipeline.data_parallel);
  TrainingRun run;
  {
    runtime::Trainer<float, A> trainer(c, data, grid, options);
    for (int s = 0; s < c.train.steps; ++s) {
      const auto stats = trainer.step();
      run.losses.push_back(stats.loss);
      run.grad_norms.push_back(stats.grad_norm);
    }
    run.checksum = trainer.param_checksum();
    run.val_loss = trainer.evaluate();
    run.peak_stash = trainer.record().peak_stash;
    run.predicted_stash = schedule::peak_stash(trainer.plan().lists());
  }
  comm::free_grid(grid);
  return run;
}

inline void expect_identical(const TrainingRun& got, const TrainingRun& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_EQ(got.losses[s], want.losses[s]) << what << " step " << s;  // bit for bit
    EXPECT_EQ(got.grad_norms[s], want.grad_norms[s]) << what << " step " << s;
  }
  EXPECT_EQ(got.checksum, want.checksum) << what;
  EXPECT_EQ(got.val_loss, want.val_loss) << what;
}

}  // namespace kpipe::test
