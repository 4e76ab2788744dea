#include "kpipe/comm/transport.hpp"

#include <chrono>
#include <climits>
#include <stdexcept>
#include <thread>

#include "kpipe/core/tensor.hpp"

namespace kpipe::comm {

namespace {
int count_of(std::size_t bytes) {
  if (bytes > std::size_t(INT_MAX)) throw std::length_error("message larger than 2 GiB");
  return int(bytes);
}

using Bytes = Kokkos::View<char*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using DeviceBytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

void MpiTransport::send(const void* data, std::size_t bytes, int peer, int tag, Request& request) {
  MPI_Isend(data, count_of(bytes), MPI_BYTE, peer, tag, comm_, &request.mpi);
}

void MpiTransport::recv(void* data, std::size_t bytes, int peer, int tag, Request& request) {
  MPI_Irecv(data, count_of(bytes), MPI_BYTE, peer, tag, comm_, &request.mpi);
}

bool MpiTransport::test(Request& request) {
  if (!request.active()) return true;
  int done = 0;
  MPI_Test(&request.mpi, &done, MPI_STATUS_IGNORE);
  if (done) complete(request);
  return done != 0;
}

bool MpiTransport::wait(Request& request, double timeout_s) {
  // Poll rather than MPI_Wait, so that a peer that never sends becomes an error message, not a hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (long spins = 0;; ++spins) {
    if (test(request)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void StagedMpiTransport::send(const void* data, std::size_t bytes, int peer, int tag, Request& request) {
  request.staging = std::make_shared<std::vector<char>>(bytes);
  Kokkos::deep_copy(Bytes(request.staging->data(), bytes), DeviceBytes(static_cast<char*>(const_cast<void*>(data)), bytes));
  MpiTransport::send(request.staging->data(), bytes, peer, tag, request);
}

void StagedMpiTransport::recv(void* data, std::size_t bytes, int peer, int tag, Request& request) {
  request.staging = std::make_shared<std::vector<char>>(bytes);
  request.device_destination = data;
  MpiTransport::recv(request.staging->data(), bytes, peer, tag, request);
}

void StagedMpiTransport::complete(Request& request) {
  if (request.device_destination && request.staging)
    Kokkos::deep_copy(DeviceBytes(static_cast<char*>(request.device_destination), request.staging->size()),
                      Bytes(request.staging->data(), request.staging->size()));
  request.staging.reset();
  request.device_destination = nullptr;
}

std::unique_ptr<Transport> make_transport(MPI_Comm comm) {
#if defined(KPIPE_CUDA_AWARE_MPI)
  constexpr bool mpi_reads_device = true;
#else
  constexpr bool mpi_reads_device = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
#endif
  if (mpi_reads_device) return std::make_unique<MpiTransport>(comm);
  return std::make_unique<StagedMpiTransport>(comm);
}

}  // namespace kpipe::comm
