#pragma once
// The one conversion of a timeout in seconds (pipeline.recv_timeout_s, a grace period) into a point on the
// steady clock. The clock counts 64-bit nanoseconds, which a double of seconds above about 9.2e9 overflows:
// the figure is clamped to [0, max_timeout_s] first (the configuration refuses anything above, so a clamp
// changes only a library caller's figure), and NaN is 0.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "kpipe/core/config.hpp"

namespace kpipe::comm {

using Deadline = std::chrono::steady_clock::time_point;

inline Deadline deadline_after(double seconds, Deadline start = std::chrono::steady_clock::now()) {
  const double bounded = std::isnan(seconds) ? 0.0 : std::clamp(seconds, 0.0, max_timeout_s);
  return start + std::chrono::duration_cast<Deadline::duration>(std::chrono::duration<double>(bounded));
}

}  // namespace kpipe::comm
