#include "kpipe/comm/transport.hpp"

#include <chrono>
#include <climits>
#include <stdexcept>
#include <thread>

namespace kpipe::comm {

namespace {
int count_of(std::size_t bytes) {
  if (bytes > std::size_t(INT_MAX)) throw std::length_error("message larger than 2 GiB");
  return int(bytes);
}
}  // namespace

void MpiTransport::send(const void* data, std::size_t bytes, int peer, int tag, Request& request) {
  MPI_Isend(data, count_of(bytes), MPI_BYTE, peer, tag, comm_, &request.mpi);
}

void MpiTransport::recv(void* data, std::size_t bytes, int peer, int tag, Request& request) {
  MPI_Irecv(data, count_of(bytes), MPI_BYTE, peer, tag, comm_, &request.mpi);
}

bool MpiTransport::wait(Request& request, double timeout_s) {
  // Poll rather than MPI_Wait, so that a peer that never sends becomes an error message, not a hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int done = 0;
  for (long spins = 0;; ++spins) {
    MPI_Test(&request.mpi, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace kpipe::comm
