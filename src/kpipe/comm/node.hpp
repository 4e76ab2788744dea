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

NodeLayout node_layout(MPI_Comm world);

// Every rank gets the same verdict: when `error` is non-empty on some ranks, the first such rank's message
// is thrown as an InputError on all of them (so that every rank exits 2 with one line, never one rank
// alone). A collective over world.
void agree_on_error(MPI_Comm world, const std::string& error);

}  // namespace kpipe::comm
