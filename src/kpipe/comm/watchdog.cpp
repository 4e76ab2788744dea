#include "kpipe/comm/watchdog.hpp"
#include "kpipe/comm/deadline.hpp"
#include "kpipe/core/exit_codes.hpp"

#include <fmt/format.h>

#include <chrono>

namespace kpipe::comm {

Watchdog::Watchdog(int rank, Bound bound) {
  thread_ = std::thread([this, rank, bound = std::move(bound)] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (ended_.wait_until(lock, deadline_after(bound.seconds), [this] { return done_; })) return;
    abort_job(ExitCode::peer_lost, fmt::format("rank {}: {} did not complete within pipeline.recv_timeout_s = {} s "
                                               "(another rank stopped or died meanwhile); ending the job",
                                               rank, bound.what, bound.seconds));
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  ended_.notify_one();
  thread_.join();
}

}  // namespace kpipe::comm
