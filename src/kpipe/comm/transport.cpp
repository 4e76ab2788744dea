#include "kpipe/comm/transport.hpp"

#include <chrono>
#include <deque>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/deadline.hpp"
#include "kpipe/comm/mpi_scalar.hpp"
#include "kpipe/comm/nccl_transport.hpp"
#include "kpipe/comm/stream_ordered_mpi.hpp"
#include "kpipe/core/fence.hpp"
#include "kpipe/core/stream_event.hpp"

namespace kpipe::comm {

namespace {

using DeviceBytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using PinnedBytes = Kokkos::View<char*, PinnedSpace>;

// A transfer MPI knows about (or, staged, will once its data has reached the host).
struct MpiState : Transfer::State {
  MPI_Request request = MPI_REQUEST_NULL;
  virtual bool posted() { return true; }  // handed to MPI
  virtual void finish() {}                // after MPI completed it
};

}  // namespace

std::size_t scalar_bytes(Scalar type) { return type == Scalar::f32 ? sizeof(float) : sizeof(double); }

bool Transport::synchronize(const ExecSpace& space, double /*timeout_s*/) {
  named_fence(space, "kpipe::comm::Transport::synchronize");
  return true;
}

// ---- MpiTransport ----

Transfer MpiTransport::send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) {
  named_fence(space, "kpipe::comm::MpiTransport::send: the buffer is complete before MPI reads it");
  auto s = std::make_shared<MpiState>();
  MPI_Isend(data, mpi_count(bytes), MPI_BYTE, peer, tag, comm_, &s->request);
  return Transfer(s);
}

Transfer MpiTransport::recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) {
  named_fence(space, "kpipe::comm::MpiTransport::recv: no queued work still reads the buffer");
  auto s = std::make_shared<MpiState>();
  MPI_Irecv(data, mpi_count(bytes), MPI_BYTE, peer, tag, comm_, &s->request);
  return Transfer(s);
}

// Collectives: comm/bounded.hpp's, done when they return (a rank that never joins ends the job, named).
Transfer MpiTransport::all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                                      const std::string& what) {
  named_fence(space, "kpipe::comm::MpiTransport::all_reduce_sum: the buffer is complete");
  allreduce(data, mpi_count(count), mpi_type_of(type), MPI_SUM, comm_, {timeout_s_, what});
  return Transfer();
}

Transfer MpiTransport::broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type, int root,
                                 const std::string& what) {
  named_fence(space, "kpipe::comm::MpiTransport::broadcast: the buffer is complete");
  bcast(data, mpi_count(count), mpi_type_of(type), root, comm_, {timeout_s_, what});
  return Transfer();
}

bool MpiTransport::test(Transfer& transfer) {
  progress();
  if (!transfer.active()) return true;
  auto& s = static_cast<MpiState&>(*transfer.state());
  if (!s.posted()) return false;
  int done = 0;
  MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
  if (!done) return false;
  s.finish();
  transfer.reset();
  return true;
}

bool MpiTransport::wait(const ExecSpace& /*space*/, Transfer& transfer, double timeout_s) {
  // Poll rather than MPI_Wait, so that a peer that never sends becomes an error message, not a hang.
  const auto deadline = deadline_after(timeout_s);
  for (long spins = 0;; ++spins) {
    if (test(transfer)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// ---- StagedMpiTransport ----

namespace {

// Pinned host buffers, reused: a buffer goes back to the pool with the event after which nothing reads or
// writes it any more (the copy to the device of a received message), and is handed out again once that event
// is done. After the first step the pool holds as many buffers as transfers were ever in flight at once.
class PinnedPool {
 public:
  PinnedBytes acquire(std::size_t bytes) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->buffer.extent(0) >= bytes && it->released.done()) {
        PinnedBytes buffer = it->buffer;
        free_.erase(it);
        return buffer;
      }
    }
    ++allocated_;
    return PinnedBytes(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kpipe::comm::StagedMpiTransport::pinned"),
                       bytes);
  }
  void release(PinnedBytes buffer, StreamEvent released) { free_.push_back({std::move(buffer), std::move(released)}); }
  int allocated() const { return allocated_; }

 private:
  struct Entry {
    PinnedBytes buffer;
    StreamEvent released;
  };
  std::deque<Entry> free_;
  int allocated_ = 0;
};

// A staged transfer: device -> pinned (on the stream) before MPI when `to_host`, pinned -> device (on the
// stream) after MPI when `to_device`. Handed to MPI by `post` once the copy to the host is done.
struct StagedState : MpiState {
  PinnedPool* pool = nullptr;
  ExecSpace space;
  PinnedBytes pinned;
  void* device = nullptr;
  std::size_t bytes = 0;
  bool to_device = false;
  bool handed_to_mpi = false;
  StreamEvent copied;
  std::function<void(StagedState&)> post;

  bool posted() override {
    if (!handed_to_mpi && copied.done()) {
      post(*this);
      handed_to_mpi = true;
    }
    return handed_to_mpi;
  }
  void finish() override {
    StreamEvent released;
    if (to_device) {
      Kokkos::deep_copy(space, DeviceBytes(static_cast<char*>(device), bytes),
                        Kokkos::subview(pinned, std::make_pair(std::size_t(0), bytes)));
      released.record(space);  // the buffer is free once this copy has run
    }
    pool->release(pinned, std::move(released));
    pinned = PinnedBytes();
  }
};

}  // namespace

struct StagedMpiTransport::Impl {
  PinnedPool pool;
  std::deque<std::weak_ptr<StagedState>> waiting;  // copies to the host not yet done, in posting order

  // A staged transfer of `bytes` at `device`, its copy to the host queued when to_host.
  std::shared_ptr<StagedState> stage(const ExecSpace& space, const void* device, std::size_t bytes, bool to_host,
                                     bool to_device) {
    auto s = std::make_shared<StagedState>();
    s->pool = &pool;
    s->space = space;
    s->pinned = pool.acquire(bytes);
    s->device = const_cast<void*>(device);
    s->bytes = bytes;
    s->to_device = to_device;
    if (to_host) {
      Kokkos::deep_copy(space, Kokkos::subview(s->pinned, std::make_pair(std::size_t(0), bytes)),
                        DeviceBytes(static_cast<char*>(s->device), bytes));
      s->copied.record(space);
    }
    return s;
  }
  // MPI collectives must be posted in the same order on every rank: staged transfers are handed to MPI in
  // the order they were posted (their copies run in that order on the stream anyway).
  void queue(const std::shared_ptr<StagedState>& s) {
    waiting.push_back(s);
    progress();
  }
  void progress() {
    while (!waiting.empty()) {
      auto s = waiting.front().lock();
      if (s && !s->posted()) return;
      waiting.pop_front();
    }
  }
};

StagedMpiTransport::StagedMpiTransport(MPI_Comm comm, double timeout_s)
    : MpiTransport(comm, timeout_s), impl_(std::make_unique<Impl>()) {}
StagedMpiTransport::~StagedMpiTransport() = default;

void StagedMpiTransport::progress() { impl_->progress(); }
int StagedMpiTransport::pinned_buffers() const { return impl_->pool.allocated(); }

Transfer StagedMpiTransport::send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) {
  auto s = impl_->stage(space, data, bytes, /*to_host=*/true, /*to_device=*/false);
  MPI_Comm comm = comm_;
  s->post = [comm, peer, tag](StagedState& t) {
    MPI_Isend(t.pinned.data(), mpi_count(t.bytes), MPI_BYTE, peer, tag, comm, &t.request);
  };
  impl_->queue(s);
  return Transfer(s);
}

Transfer StagedMpiTransport::recv(const ExecSpace& space, void* data, std::size_t bytes, int peer, int tag) {
  auto s = impl_->stage(space, data, bytes, /*to_host=*/false, /*to_device=*/true);
  MPI_Irecv(s->pinned.data(), mpi_count(bytes), MPI_BYTE, peer, tag, comm_, &s->request);
  s->handed_to_mpi = true;
  return Transfer(s);
}

// Collectives on the pinned copy, bounded (comm/bounded.hpp): run when the copy to the host is done, complete
// when they return (the request stays null), then copied back on the stream.
Transfer StagedMpiTransport::all_reduce_sum(const ExecSpace& space, void* data, std::size_t count, Scalar type,
                                            const std::string& what) {
  auto s = impl_->stage(space, data, count * scalar_bytes(type), true, true);
  MPI_Comm comm = comm_;
  const Bound bound{timeout_s_, what};
  s->post = [comm, count, type, bound](StagedState& t) {
    allreduce(t.pinned.data(), mpi_count(count), mpi_type_of(type), MPI_SUM, comm, bound);
  };
  impl_->queue(s);
  return Transfer(s);
}

Transfer StagedMpiTransport::broadcast(const ExecSpace& space, void* data, std::size_t count, Scalar type, int root,
                                       const std::string& what) {
  auto s = impl_->stage(space, data, count * scalar_bytes(type), true, true);
  MPI_Comm comm = comm_;
  const Bound bound{timeout_s_, what};
  s->post = [comm, count, type, root, bound](StagedState& t) {
    bcast(t.pinned.data(), mpi_count(count), mpi_type_of(type), root, comm, bound);
  };
  impl_->queue(s);
  return Transfer(s);
}

// ---- choosing one ----

std::unique_ptr<Transport> make_transport(TransportKind kind, MPI_Comm comm, double timeout_s) {
  if (kind == TransportKind::nccl) return make_nccl_transport(comm, timeout_s);
  if (kind == TransportKind::mpi_stream_ordered) {
    if (!Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible)
      throw std::invalid_argument("make_transport: mpi-stream-ordered needs host-accessible buffers");
    return std::make_unique<StreamOrderedMpiTransport>(comm, timeout_s);
  }
#if defined(KPIPE_CUDA_AWARE_MPI)
  constexpr bool mpi_reads_device = true;
#else
  constexpr bool mpi_reads_device = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
#endif
  if (mpi_reads_device) return std::make_unique<MpiTransport>(comm, timeout_s);
  return std::make_unique<StagedMpiTransport>(comm, timeout_s);
}

}  // namespace kpipe::comm
