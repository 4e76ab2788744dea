#include "kpipe/comm/nccl_transport.hpp"

#include <stdexcept>

#include "kpipe/build_config.hpp"

#if KPIPE_ENABLE_NCCL
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/deadline.hpp"
#include "kpipe/core/stream_event.hpp"
#endif

namespace kpipe::comm {

#if KPIPE_ENABLE_NCCL

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const char* what, ncclResult_t result) {
  throw std::runtime_error(std::string("NCCL ") + what + ": " + ncclGetErrorString(result));
}

ncclDataType_t nccl_type(Scalar type) { return type == Scalar::f32 ? ncclFloat : ncclDouble; }

class NcclTransport final : public Transport {
 public:
  NcclTransport(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    ncclUniqueId id;
    if (rank == 0) check("ncclGetUniqueId", ncclGetUniqueId(&id));
    bcast(&id, int(sizeof id), MPI_BYTE, 0, comm, {timeout_s, "the broadcast of the NCCL communicator's id"});
    // Non-blocking: ncclCommInitRankConfig returns at once and the communicator becomes ready when every
    // rank has joined, which settle() waits for with a deadline.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check("ncclCommInitRankConfig", ncclCommInitRankConfig(&comm_, size, id, rank, &config));
    settle("ncclCommInitRankConfig", timeout_s_);
  }

  ~NcclTransport() override {
    if (!comm_ || aborted_) return;  // an aborted communicator is freed already
    try {
      check("ncclCommFinalize", ncclCommFinalize(comm_));
      settle("ncclCommFinalize", timeout_s_);
      ncclCommDestroy(comm_);
    } catch (const std::exception&) {
      if (!aborted_) ncclCommAbort(comm_);
    }
  }

  const char* name() const override { return "nccl"; }
  bool stream_ordered() const override { return true; }

  Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int) override {
    enqueue("ncclSend", ncclSend(data, bytes, ncclUint8, peer, comm_, space.cuda_stream()));
    return Transfer();  // complete in stream order
  }
  Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int) override {
    enqueue("ncclRecv", ncclRecv(data, bytes, ncclUint8, peer, comm_, space.cuda_stream()));
    return Transfer();
  }
  void begin_group() override {
    check("ncclGroupStart", ncclGroupStart());
    in_group_ = true;
  }
  void end_group() override {
    in_group_ = false;
    enqueue("ncclGroupEnd", ncclGroupEnd());
  }
  // NCCL's collectives wait on the stream; synchronize() bounds them (what they are: the caller's message).
  Transfer all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                          const std::string& /*what*/) override {
    enqueue("ncclAllReduce",
            ncclAllReduce(data, data, count, nccl_type(type), ncclSum, comm_, space.cuda_stream()));
    return Transfer();
  }
  Transfer broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type, int root,
                     const std::string& /*what*/) override {
    enqueue("ncclBroadcast", ncclBroadcast(data, data, count, nccl_type(type), root, comm_, space.cuda_stream()));
    return Transfer();
  }
  // Stream order does the waiting; a failure shows in the communicator's state.
  bool wait(const ExecSpace&, Transfer&, double) override { return in_group_ || healthy(); }
  bool test(Transfer&) override { return in_group_ || healthy(); }

  bool synchronize(const ExecSpace& space, double timeout_s) override {
    StreamEvent done;
    done.record(space);
    const auto deadline = deadline_after(timeout_s);
    for (long spins = 0; !done.done(); ++spins) {
      if (!healthy() || Clock::now() > deadline) {
        ncclCommAbort(comm_);  // unblocks the stream's NCCL kernels; the communicator is gone
        aborted_ = true;
        return false;
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return healthy();
  }

 private:
  void check(const char* what, ncclResult_t result) const {
    if (result != ncclSuccess && result != ncclInProgress) fail(what, result);
  }
  // A non-blocking communicator may answer ncclInProgress: the operation is being set up (first contact
  // with a peer connects it). Nothing else may be posted until it is done.
  void enqueue(const char* what, ncclResult_t result) {
    check(what, result);
    if (!in_group_) settle(what, timeout_s_);
  }
  void settle(const char* what, double timeout_s) {
    const auto deadline = deadline_after(timeout_s);
    ncclResult_t state = ncclInProgress;
    for (long spins = 0;; ++spins) {
      check("ncclCommGetAsyncError", ncclCommGetAsyncError(comm_, &state));
      if (state != ncclInProgress) break;
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_);
        aborted_ = true;
        throw std::runtime_error(std::string("NCCL ") + what + ": not done within " + std::to_string(timeout_s) +
                                 " s (a rank of the communicator never joined or is stuck)");
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (state != ncclSuccess) fail(what, state);
  }
  bool healthy() const {
    ncclResult_t state = ncclSuccess;
    return ncclCommGetAsyncError(comm_, &state) == ncclSuccess &&
           (state == ncclSuccess || state == ncclInProgress);
  }

  ncclComm_t comm_ = nullptr;
  double timeout_s_;
  bool in_group_ = false, aborted_ = false;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm, double timeout_s) {
  return std::make_unique<NcclTransport>(comm, timeout_s);
}

#else

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm, double) {
  throw std::logic_error("make_nccl_transport: this kpipe was built without NCCL (KPIPE_ENABLE_NCCL=OFF)");
}

#endif

}  // namespace kpipe::comm
