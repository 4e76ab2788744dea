#pragma once
// Moving a stage's activations and gradients to another rank. The executor speaks only to this
// interface; messages are non-blocking: post, then wait.
//  - MpiTransport hands buffers to MPI as they are: host memory, or device memory with a CUDA-aware MPI
//    (KPIPE_ENABLE_CUDA_AWARE_MPI).
//  - StagedMpiTransport copies device buffers through host memory for an MPI that cannot read them.
//  (An NCCL transport comes separately.)
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace kpipe::comm {

struct Request {
  MPI_Request mpi = MPI_REQUEST_NULL;
  // Staged transfers: the host copy, and for a receive the device buffer it lands in after completion.
  std::shared_ptr<std::vector<char>> staging;
  void* device_destination = nullptr;
  bool active() const { return mpi != MPI_REQUEST_NULL; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual void send(const void* data, std::size_t bytes, int peer, int tag, Request& request) = 0;
  virtual void recv(void* data, std::size_t bytes, int peer, int tag, Request& request) = 0;
  // Waits for the request; returns false when it did not complete within timeout_s seconds.
  virtual bool wait(Request& request, double timeout_s) = 0;
  // Non-blocking: true when the request has completed (and its data is in place).
  virtual bool test(Request& request) = 0;
};

// Point-to-point on `comm` (the pipeline communicator) with the buffers as given.
class MpiTransport : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm) : comm_(comm) {}
  void send(const void* data, std::size_t bytes, int peer, int tag, Request& request) override;
  void recv(void* data, std::size_t bytes, int peer, int tag, Request& request) override;
  bool wait(Request& request, double timeout_s) override;
  bool test(Request& request) override;

 protected:
  virtual void complete(Request&) {}  // after MPI finished with the request
  MPI_Comm comm_;
};

// Device buffers through host copies (for MPI builds that are not CUDA-aware).
class StagedMpiTransport final : public MpiTransport {
 public:
  using MpiTransport::MpiTransport;
  void send(const void* data, std::size_t bytes, int peer, int tag, Request& request) override;
  void recv(void* data, std::size_t bytes, int peer, int tag, Request& request) override;

 protected:
  void complete(Request& request) override;
};

// The transport for buffers in kpipe's memory space: plain MPI where MPI can read that memory (host
// backends, or CUDA-aware MPI), staged through the host otherwise.
std::unique_ptr<Transport> make_transport(MPI_Comm comm);

}  // namespace kpipe::comm
