#include "kpipe/comm/watchdog.hpp"
#include "kpipe/comm/deadline.hpp"
#include "kpipe/core/exit_codes.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace kpipe::comm {

Watchdog::Watchdog(int rank, Bound bound) {
  thread_ = std::thread([this, rank, bound = std::move(bound)] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (ended_.wait_until(lock, deadline_after(bound.seconds), [this] { return done_; })) return;
    std::fprintf(stderr,
                 "kpipe: rank %d: %s did not complete within pipeline.recv_timeout_s = %g s (another rank stopped "
                 "or died meanwhile); ending the job\n",
                 rank, bound.what.c_str(), bound.seconds);
    std::fflush(stderr);
    std::_Exit(exit_status(ExitCode::peer_lost));
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
