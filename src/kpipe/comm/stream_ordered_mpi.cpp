#include "kpipe/comm/stream_ordered_mpi.hpp"

#include <chrono>
#include <stdexcept>
#include <thread>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/deadline.hpp"
#include "kpipe/comm/mpi_scalar.hpp"
#include "kpipe/core/fence.hpp"

namespace kpipe::comm {

namespace {
constexpr int the_tag = 0;  // NCCL has no tags: messages between a pair match in posting order
}  // namespace

Transfer StreamOrderedMpiTransport::send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int) {
  named_fence(space, "kpipe::comm::StreamOrderedMpiTransport::send: the stream reached the send");  // the "stream" reached the send
  group_.emplace_back();
  MPI_Issend(data, mpi_count(bytes), MPI_BYTE, peer, the_tag, comm_, &group_.back());
  if (!in_group_) complete_group();
  return Transfer();
}

Transfer StreamOrderedMpiTransport::recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int) {
  named_fence(space, "kpipe::comm::StreamOrderedMpiTransport::recv: the stream reached the receive");
  group_.emplace_back();
  MPI_Irecv(data, mpi_count(bytes), MPI_BYTE, peer, the_tag, comm_, &group_.back());
  if (!in_group_) complete_group();
  return Transfer();
}

void StreamOrderedMpiTransport::begin_group() { in_group_ = true; }

void StreamOrderedMpiTransport::end_group() {
  in_group_ = false;
  complete_group();
}

void StreamOrderedMpiTransport::complete_group() {
  const auto deadline = deadline_after(timeout_s_);
  for (long spins = 0; !failed_ && !group_.empty(); ++spins) {
    int done = 0;
    MPI_Testall(int(group_.size()), group_.data(), &done, MPI_STATUSES_IGNORE);
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      failed_ = true;  // as an aborted NCCL communicator: the requests are abandoned, the job ends
      break;
    }
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  group_.clear();
}

// Collectives bounded like every other (comm/bounded.hpp).
Transfer StreamOrderedMpiTransport::all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                                                   const std::string& what) {
  named_fence(space, "kpipe::comm::StreamOrderedMpiTransport::all_reduce_sum: the stream reached it");
  allreduce(data, mpi_count(count), mpi_type_of(type), MPI_SUM, comm_, {timeout_s_, what});
  return Transfer();
}

Transfer StreamOrderedMpiTransport::broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                                              int root, const std::string& what) {
  named_fence(space, "kpipe::comm::StreamOrderedMpiTransport::broadcast: the stream reached it");
  bcast(data, mpi_count(count), mpi_type_of(type), root, comm_, {timeout_s_, what});
  return Transfer();
}

bool StreamOrderedMpiTransport::synchronize(const ExecSpace& space, double) {
  named_fence(space, "kpipe::comm::StreamOrderedMpiTransport::synchronize");
  return !failed_;
}

}  // namespace kpipe::comm
