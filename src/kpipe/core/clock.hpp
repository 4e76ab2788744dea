#pragma once
// Wall-clock seconds on a steady clock, for the spans a run reports (steps, lists, updates).
#include <chrono>

namespace kpipe {

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kpipe
