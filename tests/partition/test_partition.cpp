// Partitioner: contiguous cover of all layers, uniform sizes, balanced optimal (against brute force) and never
// worse than uniform, deterministic ties, errors naming the keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include <fmt/ranges.h>

#include "kpipe/core/error.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/nn/block.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/partition/partition.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/validate.hpp"

#include "support/input_error.hpp"

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
  EXPECT_EQ(partition_layers(costs, 4, PartitionKind::uniform),
            (std::vector<LayerRange>{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
  EXPECT_EQ(partition_layers(costs, 10, PartitionKind::uniform).back(), (LayerRange{9, 10}));
  EXPECT_EQ(partition_layers(costs, 1, PartitionKind::uniform), (std::vector<LayerRange>{{0, 10}}));
}

TEST(Partition, BothMethodsCoverAllLayersContiguously) {
  std::mt19937 rng(7);
  for (int n = 1; n <= 20; ++n)
    for (int stages = 1; stages <= n; ++stages) {
      const auto costs = random_costs(rng, n);
      for (const auto method : {PartitionKind::uniform, PartitionKind::balanced}) {
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
        const double balanced = bottleneck(costs, partition_layers(costs, stages, PartitionKind::balanced));
        EXPECT_EQ(balanced, brute_force(costs, stages));
        EXPECT_LE(balanced, bottleneck(costs, partition_layers(costs, stages, PartitionKind::uniform)));
      }
}

TEST(Partition, BalancedFollowsTheCosts) {
  // A heavy last layer (like the LM head) gets a stage of its own.
  EXPECT_EQ(partition_layers({1, 1, 1, 1, 1, 1, 6}, 2, PartitionKind::balanced), (std::vector<LayerRange>{{0, 6}, {6, 7}}));
  // Ties go the uniform way: equal costs give the uniform partition.
  for (int n = 1; n <= 12; ++n)
    for (int stages = 1; stages <= n; ++stages) {
      const std::vector<double> costs(n, 2.5);
      EXPECT_EQ(partition_layers(costs, stages, PartitionKind::balanced), partition_layers(costs, stages, PartitionKind::uniform))
          << "n=" << n << " stages=" << stages;
    }
  // Among partitions with the same bottleneck, the evener one: {4 | 1 1 | 1 1} rather than {4 | 1 | 1 1 1}.
  EXPECT_EQ(partition_layers({4, 1, 1, 1, 1}, 3, PartitionKind::balanced), (std::vector<LayerRange>{{0, 1}, {1, 3}, {3, 5}}));
  // Zero-cost layers are fine.
  expect_cover(partition_layers({0, 0, 0, 5}, 3, PartitionKind::balanced), 4, 3);
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
      const auto balanced = partition_layers(model, ranks, chunks, PartitionKind::balanced);
      expect_cover(balanced, 8, ranks * chunks);
      EXPECT_LE(bottleneck(costs, balanced), bottleneck(costs, partition_layers(model, ranks, chunks, PartitionKind::uniform)));
    }
}

// Blocks on each stage (the embedding and the head are not blocks).
std::vector<int> blocks_per_stage(const model::ModelDesc& model, const std::vector<LayerRange>& ranges) {
  std::vector<int> blocks;
  for (const auto& r : ranges) {
    int n = 0;
    for (int l = r.first; l < r.last; ++l) n += model.layers[l].kind == model::LayerKind::block;
    blocks.push_back(n);
  }
  return blocks;
}

model::ModelDesc small_model(int vocab, int n_layers) {
  ModelConfig config;  // the small preset's shape
  config.seq_len = 128;
  config.d_model = 128;
  config.n_heads = 4;
  config.n_layers = n_layers;
  config.vocab = vocab;
  return model::describe(config);
}

TEST(Partition, TheLastStageGetsFewerBlocksAsTheVocabularyGrows) {
  // The LM head's products (6 T C V FLOPs per sequence) grow with the vocabulary; the balanced partition
  // moves blocks off the last stage to make room.
  for (const int ranks : {2, 4}) {
    std::vector<int> last_blocks;
    for (const int vocab : {256, 2048, 8192, 32768}) {
      const auto model = small_model(vocab, 8);
      const auto ranges = partition_layers(model, ranks, 1, PartitionKind::balanced, {{}, 4});
      last_blocks.push_back(blocks_per_stage(model, ranges).back());
      const auto costs = layer_costs(model);
      EXPECT_LE(bottleneck(costs, ranges), bottleneck(costs, partition_layers(model, ranks, 1, PartitionKind::uniform)));
    }
    SCOPED_TRACE(fmt::format("{} ranks: blocks on the last stage {}", ranks, fmt::join(last_blocks, ", ")));
    for (std::size_t i = 1; i < last_blocks.size(); ++i) EXPECT_LE(last_blocks[i], last_blocks[i - 1]);
    EXPECT_LT(last_blocks.back(), last_blocks.front());
    EXPECT_EQ(last_blocks.back(), 0) << "at 32768 the head alone outweighs a stage's share";
  }
}

TEST(Partition, AmongEquallyFastPartitionsTheLeastMemoryWins) {
  // Layer 0 (an embedding) costs no time but holds a large table; the head (last) is the bottleneck alone,
  // so the first two stages may split the four blocks in several equally fast ways. Without memory the
  // evenest wins; with it, the first stage (three micro-batches in flight, and the table) keeps none.
  const std::vector<double> time{0, 1, 1, 1, 1, 5};
  EXPECT_EQ(partition_layers(time, 3, PartitionKind::balanced), (std::vector<LayerRange>{{0, 3}, {3, 5}, {5, 6}}));
  LayerMemory memory{{10, 1, 1, 1, 1, 1}, {0, 1, 1, 1, 1, 1}, {3, 2, 1}};
  const auto ranges = partition_layers(time, 3, PartitionKind::balanced, memory);
  EXPECT_EQ(ranges, (std::vector<LayerRange>{{0, 1}, {1, 5}, {5, 6}}));
  EXPECT_EQ(stage_memory(memory, ranges), (std::vector<double>{10, 12, 2}));
  // Memory never costs time: the bottleneck stays the head's.
  EXPECT_EQ(bottleneck(time, ranges), 5);
  // A table too small to matter leaves the evenest partition.
  memory.state[0] = 0;
  EXPECT_EQ(partition_layers(time, 3, PartitionKind::balanced, memory), (std::vector<LayerRange>{{0, 3}, {3, 5}, {5, 6}}));
}

TEST(Partition, TheEmbeddingTableKeepsBlocksOffTheFirstStage) {
  // Four ranks, a head worth several blocks: the other stages tie on time, and memory decides. With a
  // large vocabulary the first stage (the embedding's V x C table with its gradient and moments, and
  // 1F1B's most micro-batches in flight) holds no more blocks than with bytes.
  // (At 65536 the head's own stage holds the most memory, and the others are free again: only optimality
  // is checked there.)
  std::vector<int> first_blocks;
  for (const int vocab : {256, 2048, 8192, 65536}) {
    const auto model = small_model(vocab, 8);
    const InFlight one_f_one_b{{4, 3, 2, 1}, 4};
    const auto ranges = partition_layers(model, 4, 1, PartitionKind::balanced, one_f_one_b);
    if (vocab <= 8192) first_blocks.push_back(blocks_per_stage(model, ranges).front());
    const auto memory = layer_memory(model, 4, 1, one_f_one_b);
    const auto per_stage = stage_memory(memory, ranges);
    // No other partition as fast has a smaller peak memory (brute force over the cuts).
    const auto costs = layer_costs(model);
    const double fastest = bottleneck(costs, ranges);
    const double peak = *std::max_element(per_stage.begin(), per_stage.end());
    const int n = int(costs.size());
    for (int a = 1; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        for (int c = b + 1; c < n; ++c) {
          const std::vector<LayerRange> other{{0, a}, {a, b}, {b, c}, {c, n}};
          if (bottleneck(costs, other) > fastest) continue;
          const auto m = stage_memory(memory, other);
          EXPECT_GE(*std::max_element(m.begin(), m.end()), peak) << a << " " << b << " " << c;
        }
  }
  SCOPED_TRACE(fmt::format("blocks on the first stage: {}", fmt::join(first_blocks, ", ")));
  for (std::size_t i = 1; i < first_blocks.size(); ++i) EXPECT_LE(first_blocks[i], first_blocks[i - 1]);
  EXPECT_LT(first_blocks.back(), first_blocks.front());
}

// A run's partition (what the trainer builds, the memory plan predicts and the planner prices) weighs memory
// with its schedule's peak per rank, the same on every replica of the ordered reduction.
TEST(Partition, TheConfiguredPartitionWeighsWhatTheScheduleHolds) {
  Config c;
  c.model = small_model(8192, 8).config;
  c.train.batch = 16;
  c.train.microbatches = 8;
  c.pipeline.pipeline_size = 4;
  c.pipeline.partition = PartitionKind::balanced;
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"})
    for (const int replicas : {1, 2}) {
      c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
      c.pipeline.data_parallel = replicas;
      const auto run = schedule::plan(c, schedule::Delivery::buffered).run;
      const InFlight held = in_flight(run, 2, c.train.steps);
      EXPECT_EQ(held.sequences, 2);
      EXPECT_EQ(held.per_rank, schedule::peak_stash(run.replicas.front())) << schedule << " x " << replicas;
      const auto model = model::describe(c.model);
      EXPECT_EQ(configured_partition(c, model, run), partition_layers(model, 4, 1, PartitionKind::balanced, held)) << schedule;
      // NCCL's lists (receives moved earlier) keep the same micro-batches in flight: the same partition.
      EXPECT_EQ(configured_partition(c, model, schedule::plan(c, schedule::Delivery::stream_ordered).run),
                configured_partition(c, model, run)) << schedule;
    }
  // GPipe holds every micro-batch on every rank, 1F1B p - r: the memory the partition weighs differs.
  c.pipeline.data_parallel = 1;
  c.pipeline.schedule = ScheduleKind::gpipe;
  EXPECT_EQ(in_flight(schedule::plan(c, schedule::Delivery::buffered).run, 2, c.train.steps).per_rank,
            (std::vector<int>{8, 8, 8, 8}));
  c.pipeline.schedule = ScheduleKind::one_f_one_b;
  EXPECT_EQ(in_flight(schedule::plan(c, schedule::Delivery::buffered).run, 2, c.train.steps).per_rank,
            (std::vector<int>{4, 3, 2, 1}));
}

// The bound an asynchronous run's partition weighs (schedule::stash_bound, from the configuration) is what
// the lists of the run from step 0 hold at their peak: every rule, short and long runs, with replicas, on
// either delivery. So a fresh run's partition is what it was when it was read off those lists.
TEST(Partition, TheAsynchronousStashBoundIsTheFreshRunsPeak) {
  for (const std::string schedule : {"pipedream", "2bw"})
    for (const int vertical_sync : {0, 1})
      for (const int stages : {1, 2, 3, 5})
        for (const int local : {1, 2, 4})
          for (const int replicas : {1, 2})
            for (const int steps : {1, 2, 3, 12}) {
              if (schedule == "2bw" && (vertical_sync == 1 || local < stages)) continue;
              Config c;
              c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
              c.pipeline.vertical_sync = vertical_sync;
              c.pipeline.pipeline_size = stages;
              c.pipeline.data_parallel = replicas;
              c.train.microbatches = local * replicas;
              c.train.batch = 2 * c.train.microbatches;
              c.train.steps = steps;
              const std::string what = fmt::format("{} vs {} p {} m {} x {} steps {}", schedule, vertical_sync, stages,
                                                   local, replicas, steps);
              for (const auto delivery : {schedule::Delivery::buffered, schedule::Delivery::stream_ordered}) {
                const auto run = schedule::plan(c, delivery).run;
                for (const auto& replica : run.replicas)
                  EXPECT_EQ(schedule::peak_stash(replica), schedule::stash_bound(stages, local, steps)) << what;
              }
            }
}

// Issue 28 item 5: a resumed asynchronous run is planned once, from its step, and gets the uninterrupted run's
// partition. Near the end of a run with one micro-batch per step the resumed lists hold one micro-batch per
// stage where the run held p - s: weighed by its own lists it would get another partition.
TEST(Partition, AResumedAsynchronousRunHasTheUninterruptedRunsPartition) {
  Config c;
  c.model = small_model(8192, 4).config;
  c.pipeline.schedule = ScheduleKind::pipedream;
  c.pipeline.pipeline_size = 4;
  c.pipeline.partition = PartitionKind::balanced;
  c.train.microbatches = 1;
  c.train.batch = 2;
  c.train.steps = 6;
  const auto model = model::describe(c.model);
  comm::ProcessGrid grid;
  grid.world_size = grid.pipeline_size = 4;
  const runtime::RunPlan fresh = runtime::plan_run(c, model, grid, comm::TransportKind::mpi);
  EXPECT_EQ(schedule::peak_stash(fresh.lists()), (std::vector<int>{4, 3, 2, 1}));
  for (const std::int64_t step : {1, 3, 5}) {
    const runtime::RunPlan resumed = runtime::plan_run(c, model, grid, comm::TransportKind::mpi, step);
    EXPECT_EQ(resumed.first_step, step);
    EXPECT_NE(resumed.schedule.passes.front().find(fmt::format("resumed at step {}", step)), std::string::npos)
        << resumed.schedule.passes.front();
    EXPECT_EQ(resumed.ranges, fresh.ranges) << "resumed at step " << step;
  }
  const runtime::RunPlan last = runtime::plan_run(c, model, grid, comm::TransportKind::mpi, 5);
  EXPECT_EQ(schedule::peak_stash(last.lists()), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_NE(partition_layers(model, 4, 1, PartitionKind::balanced, InFlight{schedule::peak_stash(last.lists()), 2}),
            fresh.ranges);
  EXPECT_EQ(in_flight(last.run(), 2, c.train.steps).per_rank, (std::vector<int>{4, 3, 2, 1})) << "the run's bound";
  // Resumed at or past the last step, nothing is left to run: the fresh run's lists, never executed.
  EXPECT_EQ(runtime::plan_run(c, model, grid, comm::TransportKind::mpi, 6).first_step, 0);
}

// Under recomputation a block keeps only its kept fields in flight, and the balanced partition weighs that:
// the small preset with a BPE vocabulary on 4 ranks (1F1B) then puts two blocks, not one, on the first stage.
TEST(Partition, TheConfiguredPartitionWeighsWhatRecomputationKeeps) {
  Config c;
  c.model = small_model(8192, 4).config;
  c.train.batch = 16;
  c.train.microbatches = 8;
  c.pipeline.pipeline_size = 4;
  c.pipeline.partition = PartitionKind::balanced;
  const auto model = model::describe(c.model);
  const auto run = schedule::plan(c, schedule::Delivery::buffered).run;
  const auto kept_all = configured_partition(c, model, run);
  c.memory.recompute = Recompute::block;
  const auto kept_block = configured_partition(c, model, run);
  EXPECT_EQ(kept_all, (std::vector<LayerRange>{{0, 1}, {1, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(kept_block, (std::vector<LayerRange>{{0, 2}, {2, 4}, {4, 5}, {5, 6}}));
  // Both are as fast.
  const auto costs = layer_costs(model);
  EXPECT_DOUBLE_EQ(bottleneck(costs, kept_all), bottleneck(costs, kept_block));
  InFlight held = in_flight(run, 2, c.train.steps);
  const nn::AttentionShape one{1, c.model.seq_len, c.model.n_heads, c.model.d_model / c.model.n_heads};
  for (const auto& layer : model.layers)
    held.kept_per_sequence.push_back(
        layer.kind == model::LayerKind::block
            ? double(nn::stash_elements(nn::kept_fields(nn::Recompute::block), one, 4 * c.model.d_model))
            : double(layer.stash_elems));
  const auto peak = [&](const LayerMemory& memory, const std::vector<LayerRange>& r) {
    const auto m = stage_memory(memory, r);
    return *std::max_element(m.begin(), m.end());
  };
  // Keeping every activation, the second's first stage is the heaviest: it loses on memory. Keeping what
  // recomputation keeps, it is no heavier at its peak, and wins on evenness.
  const auto full = layer_memory(model, 4, 1, in_flight(run, 2, c.train.steps)),
             kept = layer_memory(model, 4, 1, held);
  EXPECT_LT(peak(full, kept_all), peak(full, kept_block));
  EXPECT_LE(peak(kept, kept_block), peak(kept, kept_all));
  EXPECT_THROW(layer_memory(model, 4, 1, InFlight{{4, 3, 2, 1}, 2, {1.0, 2.0}}), std::invalid_argument);
}

TEST(Partition, Errors) {
  ModelConfig config;
  config.n_layers = 4;
  const model::ModelDesc model = model::describe(config);
  EXPECT_EQ(test::input_error_of([&] { partition_layers(model, 4, 2, PartitionKind::uniform); }),
            "pipeline.pipeline_size = 4 x pipeline.chunks = 2 = 8 virtual stages for a model of 6 layers (embedding, "
            "4 blocks, head): at most one stage per layer");
  EXPECT_NE(test::input_error_of([&] { partition_layers(model, 0, 1, PartitionKind::uniform); }).find("pipeline.pipeline_size = 0"),
            std::string::npos);
  EXPECT_NE(test::input_error_of([&] { partition_layers(model, 2, 0, PartitionKind::uniform); }).find("pipeline.chunks = 0"), std::string::npos);
  EXPECT_EQ(test::input_error_of([] { partition_layers({1, 2, 3}, 4, PartitionKind::balanced); }),
            "partition: 4 stages for 3 layers: need between 1 and 3 (at least one layer per stage)");
  EXPECT_NE(test::input_error_of([] { partition_layers({1, -2, 3}, 2, PartitionKind::balanced); }).find("layer 1 cost -2"), std::string::npos);
}

}  // namespace
}  // namespace kpipe::partition
