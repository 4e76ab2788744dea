// What a rank says when a peer stops answering (runtime/peer_lost.hpp), and where the ranks run
// (comm::describe_nodes): in the user's terms, with the rank, stage, replica and node of the peer, from grids
// laid out by hand (no MPI needed).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/runtime/peer_lost.hpp"

namespace kpipe {
namespace {

using schedule::Action;
using schedule::Op;

// World rank `rank` of pipeline_size x data_parallel ranks, `per_node` consecutive ranks on each node n1, n2, ...
comm::ProcessGrid grid_of(int rank, int pipeline_size, int data_parallel, int per_node) {
  comm::ProcessGrid g;
  g.world_rank = rank;
  g.world_size = pipeline_size * data_parallel;
  g.pipeline_size = pipeline_size;
  g.data_parallel = data_parallel;
  g.stage = rank % pipeline_size;
  g.replica = rank / pipeline_size;
  auto nodes = std::make_shared<std::vector<std::string>>();
  for (int r = 0; r < g.world_size; ++r) nodes->push_back("n" + std::to_string(r / per_node + 1));
  g.nodes = nodes;
  return g;
}

TEST(PeerLost, SaysWhatTheRankWaitedForAndFromWhom) {
  const auto g = grid_of(1, 4, 1, 2);
  const runtime::WaitSite site{"step", 170, 9};
  EXPECT_EQ(runtime::waiting_for(g, site, Action{Op::recv_activation, 3, 0, 0}),
            "waiting for the activation of micro-batch 3 from rank 0 (stage 0 on node n1) in step 171");
  EXPECT_EQ(runtime::waiting_for(g, site, Action{Op::recv_gradient, 2, 0, 2}),
            "waiting for the gradient of micro-batch 2 from rank 2 (stage 2 on node n2) in step 171");
  EXPECT_EQ(runtime::waiting_for(g, site, Action{Op::send_activation, 5, 0, 2}),
            "delivering the activation of micro-batch 5 to rank 2 (stage 2 on node n2) in step 171");
  EXPECT_EQ(runtime::waiting_for(g, {"evaluation", 3, 0}, Action{Op::send_gradient, 1, 0, 0}),
            "delivering the gradient of micro-batch 1 to rank 0 (stage 0 on node n1) in evaluation 4");
  // A list's transfers as a whole (stream-ordered, NCCL): both neighbours.
  EXPECT_EQ(runtime::waiting_for(g, site, Action{Op::step, 0, 0, -1}),
            "waiting for its transfers with rank 0 (stage 0 on node n1) and rank 2 (stage 2 on node n2) to complete "
            "in step 171");
}

TEST(PeerLost, NamesTheReplicaWhereThereAreSeveral) {
  // 2 stages x 2 replicas, one rank per node: world rank 3 is stage 1 of replica 1.
  const auto g = grid_of(3, 2, 2, 1);
  EXPECT_EQ(runtime::waiting_for(g, {"step", 0, 4}, Action{Op::recv_activation, 0, 0, 0}),
            "waiting for the activation of micro-batch 0 from rank 2 (stage 0 of replica 1 on node n3) in step 1");
  // The running sum comes from the same stage of another replica (peer = that replica).
  EXPECT_EQ(runtime::waiting_for(g, {"step", 0, 4}, Action{Op::recv_sum, 1, 0, 0}),
            "waiting for the weight gradients' running sum (group 1) from rank 1 (stage 1 of replica 0 on node n2) in "
            "step 1");
}

TEST(PeerLost, WhereTheRanksRun) {
  EXPECT_EQ(comm::describe_nodes(grid_of(0, 4, 1, 2)), "2 nodes: n1 (ranks 0-1), n2 (ranks 2-3)");
  EXPECT_EQ(comm::describe_nodes(grid_of(0, 3, 1, 1)), "3 nodes: n1 (rank 0), n2 (rank 1), n3 (rank 2)");
  EXPECT_EQ(comm::describe_nodes(grid_of(0, 4000, 1, 4)), "1000 nodes, 4 ranks each");
  comm::ProcessGrid unknown = grid_of(0, 2, 1, 2);
  unknown.nodes = nullptr;  // a grid made by hand without names
  EXPECT_EQ(comm::describe_nodes(unknown), "1 node: ? (ranks 0-1)");
}

}  // namespace
}  // namespace kpipe
