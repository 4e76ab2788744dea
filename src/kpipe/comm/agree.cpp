#include "kpipe/comm/agree.hpp"

#include <exception>
#include <new>

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
  constexpr int bad_input = 1, failure = 2;
  Failure mine;
  try {
    fn();
  } catch (const InputError& e) {
    mine = {bad_input, -1, e.what()};
  } catch (const std::bad_alloc&) {
    mine = {failure, -1, "out of memory"};
  } catch (const std::exception& e) {
    mine = {failure, -1, e.what()};
  }
  if (const Failure agreed = first_failure(comm, mine, bound)) {
    if (agreed.code == bad_input) throw InputError(agreed.message);
    throw AgreedFailure(agreed.message);
  }
}

}  // namespace kpipe::comm
