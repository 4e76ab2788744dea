#include "kpipe/comm/agree.hpp"

#include <exception>

#include "kpipe/core/error.hpp"

namespace kpipe::comm {

Failure first_failure(MPI_Comm comm, const Failure& mine, const Bound& bound) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int first = allreduce(mine.code != 0 ? rank : size, MPI_MIN, comm, bound);
  if (first == size) return {};
  Failure agreed;
  agreed.rank = first;
  agreed.code = mine.code;
  bcast(&agreed.code, 1, MPI_INT, first, comm, bound);
  agreed.message = bcast(mine.message, first, comm, bound);
  return agreed;
}

void agree(MPI_Comm comm, const Bound& bound, const std::function<void()>& fn) {
  Failure mine;
  try {
    fn();
  } catch (const std::exception& e) {
    mine = {1, -1, e.what()};
  }
  if (const Failure agreed = first_failure(comm, mine, bound)) throw InputError(agreed.message);
}

}  // namespace kpipe::comm
