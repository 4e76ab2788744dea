#pragma once
// Moving a stage's activations and gradients to other ranks, and the replicas' gradient sums among them.
// The executor speaks only to this interface. It is shaped by the stream, not by MPI: every transfer is
// posted on the execution space whose queued work produces (or will read) the buffer, and "complete" means
// complete as far as work queued on that space afterwards is concerned.
//  - MpiTransport: buffers handed to MPI as they are (host memory, or device memory with a CUDA-aware MPI).
//    The space is fenced before MPI touches a buffer (free on host backends, whose kernels are done when
//    they return).
//  - StagedMpiTransport: device memory through pinned host buffers, allocated once and reused. A send's copy
//    to the host is queued on the stream and handed to MPI when an event says it is done (the host never
//    fences the stream for it); a received message is copied to the device on the stream.
//  - NcclTransport (comm/nccl_transport.hpp): ncclSend/ncclRecv and NCCL collectives on the space's CUDA
//    stream. Transfers complete in stream order: they must be posted exactly where the schedule places them,
//    never ahead, in the groups schedule/stream_order.hpp proves deadlock-free (stream_ordered()).
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe::comm {

// Element types of the collectives: kpipe's tensor types.
enum class Scalar { f32, f64 };
template <class T> constexpr Scalar scalar_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "collectives move float or double");
  return std::is_same_v<T, float> ? Scalar::f32 : Scalar::f64;
}
std::size_t scalar_bytes(Scalar type);

// One posted send, receive or collective; inactive when there is none or it has completed. What it holds is
// its transport's business.
class Transfer {
 public:
  struct State {
    virtual ~State() = default;
  };
  Transfer() = default;
  explicit Transfer(std::shared_ptr<State> state) : state_(std::move(state)) {}
  bool active() const { return state_ != nullptr; }
  State* state() const { return state_.get(); }
  void reset() { state_.reset(); }

 private:
  std::shared_ptr<State> state_;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // True when transfers complete in stream order on the execution space (NCCL). The caller must then post
  // them exactly where the schedule places them and never ahead (a receive posted early would stall the
  // stream until its data arrives), grouping consecutive ones with begin_group/end_group; a wait only
  // checks for errors, and synchronize() is where the host learns that the stream got through.
  virtual bool stream_ordered() const { return false; }

  // `bytes` at `data` (kpipe's memory space) to / from `peer` (a rank of the transport's communicator).
  // The data sent is what the work queued on `space` before the call leaves in the buffer; work queued on
  // `space` after a completed wait reads the received data. `tag` tells messages between one pair apart
  // (MPI); NCCL matches them in posting order instead, which the schedule's ordering check guarantees.
  virtual Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) = 0;
  virtual Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) = 0;
  // Sends and receives posted between these progress together (an NCCL group: two ranks that send to each
  // other inside one cannot deadlock). MPI posts never block: nothing to do.
  virtual void begin_group() {}
  virtual void end_group() {}

  // Collectives over every rank of the communicator, in place on `count` elements at `data`. `what` names
  // the collective in the message when a rank never joins: MPI's run under comm/bounded.hpp's deadline
  // (the rank that stopped is named; the call returns when done), NCCL's on the stream under the
  // communicator's own deadline (synchronize()).
  virtual Transfer all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                                  const std::string& what) = 0;
  virtual Transfer broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type, int root,
                             const std::string& what) = 0;

  // Until the transfer is complete for work queued on `space` from now on (it is then inactive); false when
  // that takes longer than timeout_s (the caller ends the job: a peer is gone or stuck).
  virtual bool wait(const ExecSpace& space, Transfer& transfer, double timeout_s) = 0;
  // Non-blocking: true when the transfer has completed (it is then inactive). Moves staged transfers along.
  virtual bool test(Transfer& transfer) = 0;
  // Until everything posted so far has completed on the device too; false after timeout_s (a stream-ordered
  // transport is then aborted and unusable). Call before the host reads what the transfers produced.
  virtual bool synchronize(const ExecSpace& space, double timeout_s);
};

// Point-to-point on `comm` with the buffers as given; collectives bounded by timeout_s (comm/bounded.hpp).
class MpiTransport : public Transport {
 public:
  MpiTransport(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {}
  const char* name() const override { return "mpi"; }
  Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) override;
  Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) override;
  Transfer all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                          const std::string& what) override;
  Transfer broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type, int root,
                     const std::string& what) override;
  bool wait(const ExecSpace& space, Transfer& transfer, double timeout_s) override;
  bool test(Transfer& transfer) override;

 protected:
  virtual void progress() {}  // moves posted-but-not-yet-handed-to-MPI transfers along (staged)
  MPI_Comm comm_;
  double timeout_s_;
};

// Device buffers through pinned host buffers (an MPI that cannot read device memory).
class StagedMpiTransport final : public MpiTransport {
 public:
  StagedMpiTransport(MPI_Comm comm, double timeout_s);
  ~StagedMpiTransport() override;
  const char* name() const override { return "mpi-staged"; }
  Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) override;
  Transfer recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) override;
  Transfer all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                          const std::string& what) override;
  Transfer broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type, int root,
                     const std::string& what) override;
  // Pinned buffers allocated so far: as many as transfers were ever in flight at once, not one per message.
  int pinned_buffers() const;

 protected:
  void progress() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What moves a run's data:
//  - mpi: the MPI transport for kpipe's memory space (plain where MPI can read it: host backends or
//    KPIPE_ENABLE_CUDA_AWARE_MPI; staged through pinned host buffers otherwise);
//  - nccl: NcclTransport, built from an ncclUniqueId broadcast over the communicator (a collective; bounded);
//  - mpi_stream_ordered: MPI with NCCL's semantics, so that host builds run NCCL's path end to end (tests;
//    comm/stream_ordered_mpi.hpp).
enum class TransportKind : std::uint8_t { mpi, nccl, mpi_stream_ordered };
// NCCL and its emulation run transfers in stream order, exactly where the lists put them.
constexpr bool stream_ordered(TransportKind kind) { return kind != TransportKind::mpi; }

std::unique_ptr<Transport> make_transport(TransportKind kind, MPI_Comm comm, double timeout_s);

}  // namespace kpipe::comm

namespace kpipe {
template <> struct EnumText<comm::TransportKind> {
  static constexpr std::array<std::string_view, 3> names{"mpi", "nccl", "mpi-stream-ordered"};
};
}  // namespace kpipe

namespace kpipe::comm {

}  // namespace kpipe::comm
