#pragma once
// The process grid: world = pipeline_size x data_parallel ranks. World rank w is pipeline stage
// w % pipeline_size of replica w / pipeline_size, so the stages of one pipeline are neighbours (on one node
// where possible) and replicas of a stage are pipeline_size apart.
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace kpipe::comm {

struct ProcessGrid {
  int world_rank = 0, world_size = 1;
  int pipeline_size = 1, data_parallel = 1;
  int stage = 0;    // rank within the pipeline
  int replica = 0;  // which pipeline
  MPI_Comm world = MPI_COMM_NULL;     // all ranks of the run
  MPI_Comm pipeline = MPI_COMM_NULL;  // the ranks of this replica's pipeline, ordered by stage
  MPI_Comm replicas = MPI_COMM_NULL;  // the ranks holding this stage in every replica, ordered by replica
  // The node (host) name of every world rank, for messages that name a rank that stopped answering. Shared:
  // grids are copied, the names are not.
  std::shared_ptr<const std::vector<std::string>> nodes;
  std::string node_of(int world_rank) const;  // "?" where unknown
};

// Checks world size = pipeline_size x data_parallel (InputError naming both keys and the world size,
// raised identically on every rank) and splits the communicators, each split bounded by timeout_s
// (pipeline.recv_timeout_s; MPI_Comm_split has no non-blocking form: a comm::Watchdog ends the job), and
// gathers every rank's node name (a bounded collective).
ProcessGrid make_grid(MPI_Comm world, int pipeline_size, int data_parallel, double timeout_s = 300);
// Where the ranks run, for the log: "2 nodes: n1 (ranks 0-1), n2 (ranks 2-3)"; past 8 nodes their count and
// ranks per node alone ("1000 nodes, 4 ranks each").
std::string describe_nodes(const ProcessGrid& grid);
void free_grid(ProcessGrid& grid);

}  // namespace kpipe::comm
