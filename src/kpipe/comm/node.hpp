#pragma once
// Where a rank sits on its node: the ranks that share memory with it (MPI_Comm_split_type), which is what
// decides the GPU a rank drives and how many host threads the node's cores give each rank.
#include <mpi.h>

#include <string>

namespace kpipe::comm {

struct NodeLayout {
  int local_rank = 0;  // among the ranks of this node, in world order
  int local_size = 1;  // ranks on this node
  std::string name;    // the node's name (MPI_Get_processor_name), for messages
};

// A collective over world; the split (which has no non-blocking form) is watched: a rank that never joins
// ends the job after timeout_s (comm/watchdog.hpp).
NodeLayout node_layout(MPI_Comm world, double timeout_s);

// This process's node (host) name, as MPI reports it (MPI_Get_processor_name).
std::string node_name();

}  // namespace kpipe::comm
