#pragma once
// Agreeing on a failure. A check that fails on one rank only (rank 0 opening --metrics under a directory
// that does not exist, one rank's checkpoint file on a full disk) must end the same way on every rank, at
// once, and be reported once: every rank passes what it found, and every rank learns the failure of the
// lowest failing rank. All collectives here are bounded (comm/bounded.hpp).
#include <mpi.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "kpipe/comm/bounded.hpp"

namespace kpipe::comm {

struct Failure {
  int code = 0;         // 0: none; otherwise the caller's kind of failure
  int rank = -1;        // the rank of comm that found it (the lowest, when several did)
  std::string message;  // that rank's message
  explicit operator bool() const { return code != 0; }
};

// Collective: every rank passes its own failure (code 0 when none); every rank gets the failure of the
// lowest failing rank, or code 0 when none failed. One small allreduce when nothing failed.
Failure first_failure(MPI_Comm comm, const Failure& mine, const Bound& bound);

// What agree() throws on every rank when the lowest failing rank's failure was not bad input (out of memory, a
// system failure): the program reports it once and ends with its failure code on every rank.
struct AgreedFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs fn on this rank; when it throws on any rank, every rank throws the same exception with the message of
// the lowest failing rank: InputError when that was an InputError, AgreedFailure otherwise ("out of memory"
// for a std::bad_alloc). Doubles as a barrier.
void agree(MPI_Comm comm, const Bound& bound, const std::function<void()>& fn);

}  // namespace kpipe::comm
