// Single-rank training: the model learns real text, micro-batching does not change the step, and a run
// is reproducible from its seed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/data/entropy.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/runtime/trainer.hpp"

#include "support/corpus.hpp"

namespace kpipe {
namespace {

struct Result {
  std::vector<double> losses;
  std::uint64_t checksum = 0;
  double val_loss = 0;
  std::vector<float> params;
};

Result train(const Config& c, const data::Corpus& corpus) {
  auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
  Result r;
  {
    runtime::Trainer<float> trainer(c, corpus, grid);
    for (int s = 0; s < c.train.steps; ++s) r.losses.push_back(trainer.step().loss);
    r.checksum = trainer.param_checksum();
    r.val_loss = trainer.evaluate();
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), trainer.stage().chunk(0).params().values());
    r.params.assign(host.data(), host.data() + host.extent(0));
  }
  comm::free_grid(grid);
  return r;
}

Config quick_config() {
  Config c;  // tiny preset
  c.model.seq_len = 32;
  c.train.batch = 8;
  c.train.steps = 4;
  c.train.eval_batches = 2;
  return c;
}

TEST(Training, SmallPresetLearnsRealTextBelowItsUnigramEntropy) {
  const std::string path = "/usr/share/common-licenses/GPL-3";  // on every Debian system
  std::ifstream file(path, std::ios::binary);
  ASSERT_TRUE(file) << path;
  std::stringstream bytes;
  bytes << file.rdbuf();
  Config c = preset("small");
  c.train.steps = 250;
  const auto corpus = data::text_corpus(bytes.str(), c.data.val_fraction, path);
  const double unigram = data::unigram_entropy_nats(corpus.train.read_all());
  const auto r = train(c, corpus);
  EXPECT_NEAR(r.losses.front(), std::log(256.0), 0.15);  // near-uniform predictions at initialization
  // A unigram model would reach `unigram` nats; the transformer must use context to go well below it.
  EXPECT_LT(r.val_loss, unigram - 0.4) << "unigram entropy " << unigram;
  EXPECT_LT(r.losses.back(), r.losses.front() / 2);
}

TEST(Training, MicrobatchingGivesTheSameStepWithinFloatTolerance) {
  Config c = quick_config();
  c.train.microbatches = 1;
  const auto one = train(c, test::corpus());
  c.train.microbatches = 4;
  const auto four = train(c, test::corpus());
  for (std::size_t s = 0; s < one.losses.size(); ++s)
    EXPECT_NEAR(four.losses[s], one.losses[s], 2e-5 * one.losses[s]) << "step " << s;
  ASSERT_EQ(one.params.size(), four.params.size());
  double max_diff = 0;
  for (std::size_t i = 0; i < one.params.size(); ++i)
    max_diff = std::max(max_diff, double(std::abs(one.params[i] - four.params[i])));
  EXPECT_LT(max_diff, 1e-4);
  EXPECT_GT(max_diff, 0.0) << "m=4 accumulates in another order: bit-identity would be suspicious";
}

TEST(Training, SameSeedSameChecksumOtherSeedOtherChecksum) {
  Config c = quick_config();
  const auto a = train(c, test::corpus());
  const auto b = train(c, test::corpus());
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_EQ(a.losses, b.losses);
  c.train.seed += 1;
  EXPECT_NE(train(c, test::corpus()).checksum, a.checksum);
}

TEST(Training, SgdWithMomentumAlsoLearns) {
  Config c = quick_config();
  c.train.steps = 30;
  c.optim.kind = OptimizerKind::sgd;
  c.optim.lr = 0.5;
  const auto r = train(c, test::corpus());
  EXPECT_LT(r.losses.back(), r.losses.front() - 0.5);
}

}  // namespace
}  // namespace kpipe
