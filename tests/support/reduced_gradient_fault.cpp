#include "support/reduced_gradient_fault.hpp"

#include <cstdint>
#include <cstring>

namespace kpipe::test {
namespace {

struct State {
  bool armed = false, fired = false;
  GradientFault fault;
  int seen = 0;                             // matching collectives started since arm()
  MPI_Request request = MPI_REQUEST_NULL;   // the nth's, until it completes
  float* buffer = nullptr;
};

State& state() {
  static State s;
  return s;
}

// A collective starting: the nth matching one is remembered with its buffer.
void started(void* buffer, int count, MPI_Datatype type, MPI_Comm comm, MPI_Request* request) {
  State& s = state();
  if (!s.armed || s.fired || count != s.fault.count || type != MPI_FLOAT ||
      (s.fault.comm != MPI_COMM_NULL && comm != s.fault.comm))
    return;
  if (++s.seen != s.fault.nth) return;
  s.request = *request;
  s.buffer = static_cast<float*>(buffer);
}

// A request that was `before` has completed.
void completed(MPI_Request before) {
  State& s = state();
  if (!s.armed || s.fired || s.request == MPI_REQUEST_NULL || before != s.request) return;
  std::uint32_t bits;
  std::memcpy(&bits, s.buffer + s.fault.element, sizeof bits);
  bits ^= 1u << s.fault.bit;
  std::memcpy(s.buffer + s.fault.element, &bits, sizeof bits);
  s.fired = true;
  s.request = MPI_REQUEST_NULL;
}

}  // namespace

void arm(const GradientFault& fault) {
  State& s = state();
  s = State{};
  s.armed = true;
  s.fault = fault;
}

void disarm() { state() = State{}; }

bool gradient_fault_fired() { return state().fired; }

}  // namespace kpipe::test

// The profiling interface's wrappers (MPI standard, "Profiling Interface").
extern "C" {

int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* request) {
  const int rc = PMPI_Ibcast(buffer, count, type, root, comm, request);
  kpipe::test::started(buffer, count, type, comm, request);
  return rc;
}

int MPI_Iallreduce(const void* send, void* receive, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
  const int rc = PMPI_Iallreduce(send, receive, count, type, op, comm, request);
  kpipe::test::started(receive, count, type, comm, request);
  return rc;
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  const MPI_Request before = *request;
  const int rc = PMPI_Test(request, flag, status);
  if (*flag) kpipe::test::completed(before);
  return rc;
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  const MPI_Request before = *request;
  const int rc = PMPI_Wait(request, status);
  kpipe::test::completed(before);
  return rc;
}

}  // extern "C"
