#include "kpipe/core/stream_event.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kpipe/core/fence.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kpipe {

#if defined(KOKKOS_ENABLE_CUDA)
static_assert(std::is_same_v<ExecSpace, Kokkos::Cuda>, "kpipe's CUDA builds run their kernels on Kokkos::Cuda");

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
}  // namespace

StreamEvent::StreamEvent(bool timing) : timing_(timing) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  event_ = e;
}
StreamEvent::~StreamEvent() {
  if (event_) cudaEventDestroy(as_event(event_));
}
void StreamEvent::record(const ExecSpace& space) {
  check(cudaEventRecord(as_event(event_), space.cuda_stream()), "cudaEventRecord");
  recorded_ = true;
}
bool StreamEvent::done() const {
  if (!recorded_) return true;
  const cudaError_t status = cudaEventQuery(as_event(event_));
  if (status == cudaErrorNotReady) return false;
  check(status, "cudaEventQuery");
  return true;
}
void StreamEvent::wait() const {
  if (recorded_) check(cudaEventSynchronize(as_event(event_)), "cudaEventSynchronize");
}
double elapsed_seconds(const StreamEvent& from, const StreamEvent& to) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, as_event(from.event_), as_event(to.event_)), "cudaEventElapsedTime");
  return 1e-3 * double(ms);
}
#else
// Host backends (and any device backend without an event API here): record is a fence, so done() holds at once.
StreamEvent::StreamEvent(bool timing) : timing_(timing) {}
StreamEvent::~StreamEvent() = default;
void StreamEvent::record(const ExecSpace& space) {
  named_fence(space, "kpipe::StreamEvent::record: on host backends an event is a fence");
  host_time_ = std::chrono::steady_clock::now();
  recorded_ = true;
}
bool StreamEvent::done() const { return true; }
void StreamEvent::wait() const {}
double elapsed_seconds(const StreamEvent& from, const StreamEvent& to) {
  return std::chrono::duration<double>(to.host_time_ - from.host_time_).count();
}
#endif

StreamEvent::StreamEvent(StreamEvent&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)),
      timing_(other.timing_),
      recorded_(std::exchange(other.recorded_, false)),
      host_time_(other.host_time_) {}

StreamEvent& StreamEvent::operator=(StreamEvent&& other) noexcept {
  std::swap(event_, other.event_);
  std::swap(timing_, other.timing_);
  std::swap(recorded_, other.recorded_);
  std::swap(host_time_, other.host_time_);
  return *this;
}

}  // namespace kpipe
