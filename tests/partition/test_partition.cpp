// Partitioner: contiguous cover of all layers, uniform sizes, balanced optimal (against brute force) and never
// worse than uniform, deterministic ties, errors naming the keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "kpipe/core/error.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/partition/partition.hpp"

namespace kpipe::partition {
namespace {

double bottleneck(const std::vector<double>& costs, const std::vector<LayerRange>& ranges) {
  const auto per_stage = stage_costs(costs, ranges);
  return *std::max_element(per_stage.begin(), per_stage.end());
}

void expect_cover(const std::vector<LayerRange>& ranges, int layers, int stages) {
  ASSERT_EQ(int(ranges.size()), stages);
  int next = 0;
  for (const auto& r : ranges) {
    EXPECT_EQ(r.first, next);
    EXPECT_GE(r.size(), 1);
    next = r.last;
  }
  EXPECT_EQ(next, layers);
}

// The best bottleneck over every way of cutting the layers into `stages` non-empty ranges.
double brute_force(const std::vector<double>& costs, int stages) {
  const int n = int(costs.size());
  double best = 1e300;
  std::vector<LayerRange> ranges;
  std::function<void(int, int)> cut = [&](int first, int left) {
    if (left == 1) {
      ranges.push_back({first, n});
      best = std::min(best, bottleneck(costs, ranges));
      ranges.pop_back();
      return;
    }
    for (int last = first + 1; last + left - 1 <= n; ++last) {
      ranges.push_back({first, last});
      cut(last, left - 1);
      ranges.pop_back();
    }
  };
  cut(0, stages);
  return best;
}

std::vector<double> random_costs(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  std::vector<double> costs(n);
  for (auto& c : costs) c = cost(rng);
  return costs;
}

TEST(Partition, UniformSplitsByCountEarlierStagesFirst) {
  const std::vector<double> costs(10, 1.0);
  EXPECT_EQ(partition_layers(costs, 4, "uniform"),
            (std::vector<LayerRange>{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
  EXPECT_EQ(partition_layers(costs, 10, "uniform").back(), (LayerRange{9, 10}));
  EXPECT_EQ(partition_layers(costs, 1, "uniform"), (std::vector<LayerRange>{{0, 10}}));
}

TEST(Partition, BothMethodsCoverAllLayersContiguously) {
  std::mt19937 rng(7);
  for (int n = 1; n <= 20; ++n)
    for (int stages = 1; stages <= n; ++stages) {
      const auto costs = random_costs(rng, n);
      for (const auto& method : partition_methods()) {
        SCOPED_TRACE(fmt::format("{} n={} stages={}", method, n, stages));
        expect_cover(partition_layers(costs, stages, method), n, stages);
      }
    }
}

TEST(Partition, BalancedIsOptimalAndNeverWorseThanUniform) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial)
    for (int n = 1; n <= 9; ++n)
      for (int stages = 1; stages <= std::min(n, 5); ++stages) {
        SCOPED_TRACE(fmt::format("trial {} n={} stages={}", trial, n, stages));
        const auto costs = random_costs(rng, n);
        const double balanced = bottleneck(costs, partition_layers(costs, stages, "balanced"));
        EXPECT_EQ(balanced, brute_force(costs, stages));
        EXPECT_LE(balanced, bottleneck(costs, partition_layers(costs, stages, "uniform")));
      }
}

TEST(Partition, BalancedFollowsTheCosts) {
  // A heavy last layer (like the LM head) gets a stage of its own.
  EXPECT_EQ(partition_layers({1, 1, 1, 1, 1, 1, 6}, 2, "balanced"), (std::vector<LayerRange>{{0, 6}, {6, 7}}));
  // Ties go the uniform way: equal costs give the uniform partition.
  for (int n = 1; n <= 12; ++n)
    for (int stages = 1; stages <= n; ++stages) {
      const std::vector<double> costs(n, 2.5);
      EXPECT_EQ(partition_layers(costs, stages, "balanced"), partition_layers(costs, stages, "uniform"))
          << "n=" << n << " stages=" << stages;
    }
  // Among partitions with the same bottleneck, the evener one: {4 | 1 1 | 1 1} rather than {4 | 1 | 1 1 1}.
  EXPECT_EQ(partition_layers({4, 1, 1, 1, 1}, 3, "balanced"), (std::vector<LayerRange>{{0, 1}, {1, 3}, {3, 5}}));
  // Zero-cost layers are fine.
  expect_cover(partition_layers({0, 0, 0, 5}, 3, "balanced"), 4, 3);
}

TEST(Partition, ModelDescription) {
  ModelConfig config;
  config.n_layers = 6;
  const model::ModelDesc model = model::describe(config);  // embedding, 6 blocks, head
  const auto costs = layer_costs(model);
  ASSERT_EQ(costs.size(), 8u);
  EXPECT_DOUBLE_EQ(costs[1], model.layers[1].forward_flops + model.layers[1].backward_input_flops +
                                 model.layers[1].backward_weight_flops);
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int chunks = 1; ranks * chunks <= 8; ++chunks) {
      const auto balanced = partition_layers(model, ranks, chunks, "balanced");
      expect_cover(balanced, 8, ranks * chunks);
      EXPECT_LE(bottleneck(costs, balanced), bottleneck(costs, partition_layers(model, ranks, chunks, "uniform")));
    }
}

template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Partition, Errors) {
  ModelConfig config;
  config.n_layers = 4;
  const model::ModelDesc model = model::describe(config);
  EXPECT_EQ(error_of([&] { partition_layers(model, 4, 2, "uniform"); }),
            "pipeline.pipeline_size = 4 x pipeline.chunks = 2 = 8 virtual stages for a model of 6 layers (embedding, "
            "4 blocks, head): at most one stage per layer");
  EXPECT_EQ(error_of([&] { partition_layers(model, 2, 1, "greedy"); }),
            "pipeline.partition = 'greedy': unknown method (uniform, balanced)");
  EXPECT_NE(error_of([&] { partition_layers(model, 0, 1, "uniform"); }).find("pipeline.pipeline_size = 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { partition_layers(model, 2, 0, "uniform"); }).find("pipeline.chunks = 0"), std::string::npos);
  EXPECT_EQ(error_of([] { partition_layers({1, 2, 3}, 4, "balanced"); }),
            "partition: 4 stages for 3 layers: need between 1 and 3 (at least one layer per stage)");
  EXPECT_NE(error_of([] { partition_layers({1, -2, 3}, 2, "balanced"); }).find("layer 1 cost -2"), std::string::npos);
}

}  // namespace
}  // namespace kpipe::partition
