#pragma once
// Moving a stage's activations and gradients to another rank. The executor speaks only to this
// interface; MpiTransport is the implementation for host buffers and, with CUDA-aware MPI, device
// buffers (an NCCL transport comes separately). Messages are non-blocking: post, then wait.
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

namespace kpipe::comm {

struct Request {
  MPI_Request mpi = MPI_REQUEST_NULL;
  bool active() const { return mpi != MPI_REQUEST_NULL; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual void send(const void* data, std::size_t bytes, int peer, int tag, Request& request) = 0;
  virtual void recv(void* data, std::size_t bytes, int peer, int tag, Request& request) = 0;
  // Waits for the request; returns false when it did not complete within timeout_s seconds.
  virtual bool wait(Request& request, double timeout_s) = 0;
};

// Point-to-point on `comm` (the pipeline communicator). Buffers must be accessible to MPI: host memory,
// or device memory with a CUDA-aware MPI (KPIPE_ENABLE_CUDA_AWARE_MPI).
class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm) : comm_(comm) {}
  void send(const void* data, std::size_t bytes, int peer, int tag, Request& request) override;
  void recv(void* data, std::size_t bytes, int peer, int tag, Request& request) override;
  bool wait(Request& request, double timeout_s) override;

 private:
  MPI_Comm comm_;
};

}  // namespace kpipe::comm
