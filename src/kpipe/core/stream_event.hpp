#pragma once
// A point in an execution space's queue of work, for waiting on one piece of work (a copy, a kernel) without
// fencing everything queued after it, and for timing work where it runs. On CUDA a cudaEvent_t recorded on
// the space's stream; on host backends, whose kernels have finished when they return, recording fences the
// space (a no-op in practice) and notes the time.
#include <chrono>
#include <memory>

#include "kpipe/core/tensor.hpp"

namespace kpipe {

class StreamEvent {
 public:
  // timing: the event can be an end of elapsed_seconds (CUDA events without it are cheaper).
  explicit StreamEvent(bool timing = false);
  ~StreamEvent();
  StreamEvent(StreamEvent&&) noexcept;
  StreamEvent& operator=(StreamEvent&&) noexcept;
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;

  void record(const ExecSpace& space);  // the point: after the work queued on space so far
  bool done() const;                    // the work before the point has finished (true when never recorded)
  void wait() const;                    // the host waits until done()

 private:
  friend double elapsed_seconds(const StreamEvent& from, const StreamEvent& to);
  void* event_ = nullptr;  // cudaEvent_t where kpipe runs on CUDA
  bool timing_ = false, recorded_ = false;
  std::chrono::steady_clock::time_point host_time_{};
};

// Seconds from `from` to `to`, both recorded with timing and done.
double elapsed_seconds(const StreamEvent& from, const StreamEvent& to);

}  // namespace kpipe
