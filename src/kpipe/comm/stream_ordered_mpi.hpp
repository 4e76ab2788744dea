#pragma once
// MPI with NCCL's semantics, so that the NCCL paths (the executor's stream-ordered mode, the schedule pass
// and proof of schedule/stream_order.hpp, the ordered replica reduction) run and are tested where there is no
// GPU. Like NCCL:
//  - no tags: every message between a pair of ranks goes with one tag, so MPI matches them in posting order;
//  - sends wait for their receives: MPI_Issend, which completes only once the receive is posted;
//  - a group's operations are posted together, and nothing after the group runs before all of them are done
//    (as nothing queued after an NCCL group runs before it on the stream); an operation outside a group is a
//    group of one.
// A group not done within timeout_s marks the transport failed: every later wait returns false (the executor
// then reports the timeout), as an NCCL communicator that a watchdog aborted would.
// Selected by the test hook KPIPE_TEST_TRANSPORT=mpi-stream-ordered (runtime/trainer.cpp); buffers must be
// host-accessible (host backends).
#include <mpi.h>

#include <vector>

#include "kpipe/comm/transport.hpp"

namespace kpipe::comm {

class StreamOrderedMpiTransport final : public Transport {
 public:
  StreamOrderedMpiTransport(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {}
  const char* name() const override { return "mpi-stream-ordered"; }
  bool stream_ordered() const override { return true; }
  Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) override;
  Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) override;
  void begin_group() override;
  void end_group() override;
  Transfer all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                          const std::string& what) override;
  Transfer broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type, int root,
                     const std::string& what) override;
  bool wait(const ExecSpace&, Transfer&, double) override { return !failed_; }
  bool test(Transfer&) override { return !failed_; }
  bool synchronize(const ExecSpace& space, double) override;

 private:
  void complete_group();

  MPI_Comm comm_;
  double timeout_s_;
  bool in_group_ = false, failed_ = false;
  std::vector<MPI_Request> group_;
};

}  // namespace kpipe::comm
