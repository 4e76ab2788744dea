// The verdict on the replicas' state hashes (runtime/replica_check.hpp), from grids laid out by hand: the odd one
// out of three or more named, both of two, every replica where no majority decides; the stages apart; the
// nodes to exclude, each once, and as the metrics give them to a batch script.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/runtime/metrics.hpp"
#include "kpipe/runtime/replica_check.hpp"

namespace kpipe {
namespace {

// pipeline_size x data_parallel ranks, `per_node` consecutive world ranks per node n1, n2, ...
comm::ProcessGrid replicated_grid(int pipeline_size, int data_parallel, int per_node) {
  comm::ProcessGrid g;
  g.world_size = pipeline_size * data_parallel;
  g.pipeline_size = pipeline_size;
  g.data_parallel = data_parallel;
  auto nodes = std::make_shared<std::vector<std::string>>();
  for (int r = 0; r < g.world_size; ++r) nodes->push_back("n" + std::to_string(r / per_node + 1));
  g.nodes = nodes;
  return g;
}

TEST(ReplicaCheck, AgreedReplicasGiveTheModelsHashAsTheSumOfItsStages) {
  const auto g = replicated_grid(2, 3, 2);
  const auto verdict = runtime::judge_replicas({10, 32, 10, 32, 10, 32}, g, "after step 4");
  EXPECT_TRUE(verdict.agreed());
  EXPECT_EQ(verdict.state_hash, 42u);
}

TEST(ReplicaCheck, NamesTheOddOneOutOfThree) {
  const auto g = replicated_grid(2, 3, 2);  // stage 1 of replica 2 is world rank 5, on n3
  const auto verdict = runtime::judge_replicas({10, 32, 10, 32, 10, 33}, g, "after step 4");
  ASSERT_FALSE(verdict.agreed());
  EXPECT_EQ(verdict.corruption->what,
            "the replicas' weights and optimizer state differ after step 4: stage 1: replica 2 (rank 5 on node n3) "
            "differs from replicas 0, 1");
  EXPECT_EQ(verdict.corruption->ranks, std::vector<int>{5});
  EXPECT_EQ(verdict.corruption->nodes, std::vector<std::string>{"n3"});
}

TEST(ReplicaCheck, NamesBothOfTwo) {
  const auto g = replicated_grid(2, 2, 1);
  const auto verdict = runtime::judge_replicas({7, 8, 9, 8}, g, "after step 1");
  ASSERT_FALSE(verdict.agreed());
  EXPECT_EQ(verdict.corruption->what,
            "the replicas' weights and optimizer state differ after step 1: stage 0: replica 0 (rank 0 on node n1) "
            "and replica 1 (rank 2 on node n3) differ (no majority tells which is wrong)");
  EXPECT_EQ(verdict.corruption->ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(verdict.corruption->nodes, (std::vector<std::string>{"n1", "n3"}));
}

TEST(ReplicaCheck, NamesEveryReplicaWithoutAMajorityAndEveryStageThatDiffers) {
  const auto g = replicated_grid(2, 4, 4);  // replicas 0 and 1 on n1, 2 and 3 on n2
  // Stage 0: 2 against 2; stage 1: replica 3 alone.
  const auto verdict = runtime::judge_replicas({1, 5, 1, 5, 2, 5, 2, 6}, g, "after step 9");
  ASSERT_FALSE(verdict.agreed());
  const std::string& what = verdict.corruption->what;
  EXPECT_NE(what.find("stage 0: replica 0 (rank 0 on node n1), replica 1 (rank 2 on node n1), replica 2 (rank 4 on "
                      "node n2) and replica 3 (rank 6 on node n2) differ (no majority tells which is wrong); stage 1: "
                      "replica 3 (rank 7 on node n2) differs from replicas 0, 1, 2"),
            std::string::npos)
      << what;
  EXPECT_EQ(verdict.corruption->ranks, (std::vector<int>{0, 2, 4, 6, 7}));
  EXPECT_EQ(verdict.corruption->nodes, (std::vector<std::string>{"n1", "n2"}));
}

TEST(ReplicaCheck, OneReplicaAlwaysAgrees) {
  const auto verdict = runtime::judge_replicas({3, 4, 5}, replicated_grid(3, 1, 1), "after step 2");
  EXPECT_TRUE(verdict.agreed());
  EXPECT_EQ(verdict.state_hash, 12u);
}

// The metrics' record, whose "exclude" the batch scripts read with sed (scripts/slurm/train-*.sbatch).
TEST(ReplicaCheck, TheMetricsRecordGivesTheNodesAsSbatchExcludeTakesThem) {
  const auto g = replicated_grid(2, 2, 1);
  const auto verdict = runtime::judge_replicas({7, 8, 9, 8}, g, "after step 1");
  ASSERT_FALSE(verdict.agreed());
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kpipe-test-metrics-" + std::to_string(::getpid()))).string();
  {
    runtime::MetricsWriter metrics(path);
    metrics.write_corruption(*verdict.corruption);
  }
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::filesystem::remove(path);
  EXPECT_NE(text.str().find("\"exclude\":\"n1,n3\""), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\"silent_corruption\":true"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("\"step\""), std::string::npos) << "counted as a step's record: " << text.str();
}

}  // namespace
}  // namespace kpipe
