#include "kpipe/runtime/action_clock.hpp"

namespace kpipe::runtime {

void ActionClock::start(const ExecSpace& space) {
  origin_.record(space);
  used_ = 0;
}

std::size_t ActionClock::begin(const ExecSpace& space) {
  if (used_ == begins_.size()) {
    begins_.emplace_back(true);
    ends_.emplace_back(true);
  }
  begins_[used_].record(space);
  return used_++;
}

void ActionClock::end(const ExecSpace& space, std::size_t index) { ends_.at(index).record(space); }

std::vector<ActionClock::Span> ActionClock::read() const {
  std::vector<Span> spans(used_);
  if (used_ == 0) return spans;
  ends_[used_ - 1].wait();  // the stream runs in order: every earlier event is done too
  for (std::size_t k = 0; k < used_; ++k)
    spans[k] = {elapsed_seconds(origin_, begins_[k]), elapsed_seconds(origin_, ends_[k])};
  return spans;
}

}  // namespace kpipe::runtime
