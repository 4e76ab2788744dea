#include "kpipe/comm/node.hpp"

#include <climits>
#include <vector>

#include "kpipe/core/error.hpp"

namespace kpipe::comm {

NodeLayout node_layout(MPI_Comm world) {
  NodeLayout node;
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &node.local_rank);
  MPI_Comm_size(local, &node.local_size);
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  node.name.assign(name, std::size_t(length));
  return node;
}

void agree_on_error(MPI_Comm world, const std::string& error) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  int first = error.empty() ? INT_MAX : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, world);
  if (first == INT_MAX) return;
  int length = rank == first ? int(error.size()) : 0;
  MPI_Bcast(&length, 1, MPI_INT, first, world);
  std::vector<char> text(error.begin(), error.end());
  text.resize(std::size_t(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, first, world);
  throw InputError(std::string(text.begin(), text.end()));
}

}  // namespace kpipe::comm
