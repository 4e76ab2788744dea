// The step-time model and the recommender: recomputation's share, costs from FLOPs or a measured profile,
// the profile file, and recommendations that fit and come fastest first.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>

#include "kpipe/core/error.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/planner/costs.hpp"
#include "kpipe/planner/recommend.hpp"
#include "kpipe/planner/roofline_profile.hpp"
#include "kpipe/schedule/plan.hpp"

namespace kpipe::planner {
namespace {

Config bench() {
  Config c;
  c.model.n_layers = 8;
  c.model.d_model = 256;
  c.model.n_heads = 8;
  c.model.seq_len = 128;
  c.train.batch = 16;
  c.train.microbatches = 8;
  return c;
}

TEST(Planner, RecomputationShareGrowsWithWhatIsDropped) {
  const ModelConfig m = bench().model;
  EXPECT_EQ(recompute_share(m, nn::Recompute::none), 0.0);
  const double attention = recompute_share(m, nn::Recompute::attention), mlp = recompute_share(m, nn::Recompute::mlp),
               block = recompute_share(m, nn::Recompute::block);
  EXPECT_GT(attention, 0.0);
  EXPECT_GT(block, attention);
  EXPECT_GT(block, mlp);
  EXPECT_LT(block, 1.0);
}

TEST(Planner, CostsFromFlopsAndFromAProfile) {
  const Config c = bench();
  const auto desc = model::describe(c.model);
  Machine flops;
  flops.flops_per_second = 1e9;
  const auto layers = layer_seconds(desc, flops, nn::Recompute::none);
  EXPECT_DOUBLE_EQ(layers[1][0], desc.layers[1].forward_flops / 1e9);
  EXPECT_DOUBLE_EQ(layers[1][2], desc.layers[1].backward_weight_flops / 1e9);
  // A profile's per-kind times apply to every layer of that kind, at any depth.
  Profile p;
  p.model = c.model;
  p.model.n_layers = 2;
  p.block = {0.004, 0.005, 0.003, 0};
  p.embedding = {0.0001, 0, 0.0002, 0};
  p.head = {0.0005, 0.0004, 0.0003, 0};
  Machine measured;
  measured.profile = p;
  const auto with_block = layer_seconds(desc, measured, nn::Recompute::block);
  EXPECT_DOUBLE_EQ(with_block[4][1], 0.005);
  EXPECT_DOUBLE_EQ(with_block[4][3], 0.004 * recompute_share(c.model, nn::Recompute::block));
  EXPECT_EQ(with_block[0][3], 0.0);  // the embedding recomputes nothing
  // Per virtual stage: the stage's layers x sequences per micro-batch; the step charged to chunk 0.
  Config two = c;
  two.pipeline.pipeline_size = 2;
  const auto costs = stage_costs(two, desc, schedule::plan(two, schedule::Delivery::buffered).run, measured);
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_DOUBLE_EQ(costs[0].f, 2 * (0.0001 + 4 * 0.004));  // embedding and 4 blocks, 2 sequences
  EXPECT_DOUBLE_EQ(costs[0].b, costs[0].i + costs[0].w);
  EXPECT_DOUBLE_EQ(costs[0].activation_bytes, 2.0 * 128 * 256 * 4);
  // From FLOPs at 1 GFLOP/s, a range's costs are its layers' GFLOP per micro-batch and its
  // gradient bytes its parameters'.
  const std::vector<partition::LayerRange> ranges{{0, 3}, {3, int(desc.layers.size())}};
  const auto gflop = stage_costs(desc, layers, ranges, 4);
  double f = 0, i = 0, w = 0, parameters = 0;
  for (int l = 0; l < 3; ++l) {
    f += desc.layers[l].forward_flops;
    i += desc.layers[l].backward_input_flops;
    w += desc.layers[l].backward_weight_flops;
    parameters += double(desc.layers[l].num_params());
  }
  EXPECT_DOUBLE_EQ(gflop[0].f, 4 * f / 1e9);
  EXPECT_DOUBLE_EQ(gflop[0].i, 4 * i / 1e9);
  EXPECT_DOUBLE_EQ(gflop[0].w, 4 * w / 1e9);
  EXPECT_DOUBLE_EQ(gflop[0].b, gflop[0].i + gflop[0].w);
  EXPECT_EQ(gflop[0].r, 0.0);
  EXPECT_DOUBLE_EQ(gflop[0].gradient_bytes, 4 * parameters);
  EXPECT_GT(gflop[1].f, gflop[0].f);  // the head's products
  // Widths that differ from the profile's are refused, naming them.
  Config wide = c;
  wide.model.d_model = 512;
  EXPECT_THROW(layer_seconds(model::describe(wide.model), measured, nn::Recompute::none), InputError);
}

TEST(Planner, ProfileFileRoundTrips) {
  Profile p;
  p.model = bench().model;
  p.sequences = 2;
  p.recompute = Recompute::mlp;
  p.steps = 5;
  p.block = {0.001, 0.002, 0.003, 0.0004};
  p.optimizer = 1e-8;
  const std::string path = ::testing::TempDir() + "kpipe_profile_test.toml";
  write_profile(path, p);
  const Profile q = read_profile(path);
  EXPECT_EQ(q.model.d_model, 256);
  EXPECT_EQ(q.sequences, 2);
  EXPECT_EQ(q.recompute, Recompute::mlp);
  EXPECT_DOUBLE_EQ(q.block[3], 0.0004);
  EXPECT_DOUBLE_EQ(q.optimizer, 1e-8);
  EXPECT_TRUE(profile_fits(q, bench().model));
  std::remove(path.c_str());
  EXPECT_THROW(read_profile("/nonexistent/layers.toml"), InputError);
}

// A profile is read only from a regular file (a FIFO is refused, never opened: no writer would come) and
// never written over a device node.
TEST(Planner, ProfileFilesAreRegularFiles) {
  const std::string fifo = ::testing::TempDir() + "kpipe_profile_test.fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  try {
    read_profile(fifo);
    ADD_FAILURE() << "a FIFO was read as a profile";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("FIFO"), std::string::npos) << e.what();
  }
  std::remove(fifo.c_str());
  Profile p;
  p.model = bench().model;
  EXPECT_THROW(write_profile("/dev/full", p), InputError);
  struct stat st {};
  ASSERT_EQ(stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/full is no longer a character device";
}

TEST(Planner, RecommendationsFitAndComeFastestFirst) {
  const Config c = bench();
  Search search;
  search.ranks = 2;
  search.memory_per_rank = 100ll << 20;
  search.top = 10;
  const Recommendation r = recommend(c, search);
  ASSERT_FALSE(r.best.empty());
  EXPECT_GT(r.layouts, r.fitting);
  const auto desc = model::describe(c.model);
  for (std::size_t k = 0; k < r.best.size(); ++k) {
    const Candidate& x = r.best[k];
    EXPECT_LE(x.memory, search.memory_per_rank);
    if (k > 0) {
      EXPECT_GE(x.step_seconds, r.best[k - 1].step_seconds);
    }
    // Its memory is the plan's (the most any rank needs) for that configuration.
    const auto ranks =
        memory::plan_ranks(x.config, desc, schedule::plan(x.config, schedule::Delivery::buffered));
    std::int64_t most = 0;
    for (const auto& rank : ranks) most = std::max(most, rank.total());
    EXPECT_EQ(x.memory, most) << layout_name(x.config);
    EXPECT_EQ(x.config.pipeline.pipeline_size * x.config.pipeline.data_parallel, 2);
  }
  const std::string line = command_line(r.best.front(), 2, {"--preset", "bench"}, "100MiB");
  EXPECT_EQ(line.rfind("mpiexec -n 2 kpipe-train --preset bench --pipeline-size ", 0), 0u) << line;
  // Too little memory anywhere: no layout, and the leanest one found.
  search.memory_per_rank = 1 << 20;
  const Recommendation none = recommend(c, search);
  EXPECT_TRUE(none.best.empty());
  ASSERT_TRUE(none.leanest.has_value());
  EXPECT_GT(none.leanest->memory, search.memory_per_rank);
}

}  // namespace
}  // namespace kpipe::planner

namespace kpipe::planner {
namespace {

// The roofline profile spreads the work ledger over the layers: the embedding, n blocks and the head at the
// micro-batch's size add up to the whole model's ledger bound in every pass, whatever the number of blocks.
TEST(RooflineProfile, LayersAddUpToTheWholeModelsLedger) {
  const auto gpu = model::gpu_spec("h200");
  ASSERT_TRUE(gpu.has_value());
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    ModelConfig m;
    m.n_layers = 5;
    m.d_model = 128;
    m.n_heads = 4;
    m.seq_len = 96;
    const int sequences = 3;
    const Profile p = roofline_profile(m, sequences, precision, *gpu);
    const auto totals = model::pass_totals(model::kernel_ledger(m, sequences, precision), *gpu);
    std::array<double, 3> expected{};  // forward (with the loss), backward_input, backward_weight
    for (const auto& t : totals)
      expected[t.pass == model::Pass::backward_input ? 1 : t.pass == model::Pass::backward_weight ? 2 : 0] +=
          t.seconds;
    for (std::size_t k = 0; k < 3; ++k) {
      const double layers = (p.embedding[k] + m.n_layers * p.block[k] + p.head[k]) * sequences;
      EXPECT_NEAR(layers, expected[k], 1e-12 * expected[k]) << "pass " << k;
      EXPECT_GT(p.block[k], 0.0);
    }
    EXPECT_GT(p.optimizer, 0.0);
  }
}

// kpipe-sim's --gpu and the planner: a configuration priced on a GPU costs its ledger's bounds per stage.
TEST(RooflineProfile, StageCostsOnAGpuComeFromTheLedger) {
  Config c = bench();
  c.pipeline.pipeline_size = 2;
  c.train.microbatches = 4;
  const auto desc = model::describe(c.model);
  const auto planned = schedule::plan(c, schedule::Delivery::buffered);
  Machine gpu_machine;
  gpu_machine.gpu = model::gpu_spec("h100");
  const auto on_gpu = stage_costs(c, desc, planned.run, gpu_machine);
  Machine flops_machine;
  flops_machine.profile = roofline_profile(c.model, c.train.batch / c.train.microbatches, c.train.precision,
                                           *gpu_machine.gpu);
  const auto from_profile = stage_costs(c, desc, planned.run, flops_machine);
  ASSERT_EQ(on_gpu.size(), from_profile.size());
  for (std::size_t k = 0; k < on_gpu.size(); ++k) {
    EXPECT_DOUBLE_EQ(on_gpu[k].f, from_profile[k].f);
    EXPECT_DOUBLE_EQ(on_gpu[k].b, from_profile[k].b);
    EXPECT_GT(on_gpu[k].f, 0.0);
  }
}

}  // namespace
}  // namespace kpipe::planner
