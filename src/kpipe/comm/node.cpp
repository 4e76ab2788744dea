#include "kpipe/comm/node.hpp"

#include "kpipe/comm/watchdog.hpp"

namespace kpipe::comm {

NodeLayout node_layout(MPI_Comm world, double timeout_s) {
  NodeLayout node;
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  {
    const Watchdog watch(rank, {timeout_s, "the split of the ranks by node (MPI_Comm_split_type)"});
    MPI_Comm local = MPI_COMM_NULL;
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &node.local_rank);
    MPI_Comm_size(local, &node.local_size);
    MPI_Comm_free(&local);
  }
  node.name = node_name();
  return node;
}

std::string node_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return std::string(name, std::size_t(length));
}

}  // namespace kpipe::comm
