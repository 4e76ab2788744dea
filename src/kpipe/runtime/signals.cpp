#include "kpipe/runtime/signals.hpp"

#include <csignal>

#include "kpipe/comm/bounded.hpp"

namespace kpipe::runtime {

namespace {

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void record_stop_signal(int signal) { stop_signal = signal; }

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int received_stop_signal() { return stop_signal; }

void reset_stop_signal() { stop_signal = 0; }

int stop_requested(MPI_Comm world, double timeout_s) {
  return comm::allreduce(int(stop_signal), MPI_MAX, world, {timeout_s, "the stop-signal allreduce"});
}

}  // namespace kpipe::runtime
