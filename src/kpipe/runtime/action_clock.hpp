#pragma once
// Times one step's compute actions where they run. On a GPU the host queues work well ahead of the device:
// wall-clock readings around an action would time the queueing, and a fence after every action (what it
// took to make them meaningful) stalls the pipeline. So each action is bracketed by stream events, and the
// spans are read once at the end of the step, after the stream has caught up. On host backends an event is a
// fence and a clock reading, and the kernels are done when they return: the same figures as a wall clock.
#include <cstddef>
#include <vector>

#include "kpipe/core/stream_event.hpp"

namespace kpipe::runtime {

class ActionClock {
 public:
  struct Span {
    double start = 0, end = 0;  // seconds since start()
  };
  void start(const ExecSpace& space);                  // the step's origin
  std::size_t begin(const ExecSpace& space);           // before an action's kernels; the action's index
  void end(const ExecSpace& space, std::size_t index); // after them
  // Every action's span since start(), in begin() order; waits for the last end() to have run.
  std::vector<Span> read() const;

 private:
  StreamEvent origin_{/*timing=*/true};
  std::vector<StreamEvent> begins_, ends_;  // reused from step to step
  std::size_t used_ = 0;
};

}  // namespace kpipe::runtime
