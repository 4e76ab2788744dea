#include "kpipe/runtime/signals.hpp"

#include <csignal>

namespace kpipe::runtime {

namespace {

volatile std::sig_atomic_t stop_signal = 0;

// SIGTERM sticks: a later SIGUSR1 must not turn "end the job" back into "requeue me".
extern "C" void record_stop_signal(int signal) {
  if (stop_signal != SIGTERM) stop_signal = signal;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  // Each handler runs with both signals blocked, so that its read and write of the flag are not split.
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGUSR1);
  sigaddset(&action.sa_mask, SIGTERM);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int received_stop_signal() { return stop_signal; }

void reset_stop_signal() { stop_signal = 0; }

std::array<double, 2> stop_votes(int signal) {
  return {signal == SIGTERM ? 1.0 : 0.0, signal == SIGUSR1 ? 1.0 : 0.0};
}

int agreed_stop_signal(const std::array<double, 2>& votes) {
  if (votes[0] > 0) return SIGTERM;
  return votes[1] > 0 ? SIGUSR1 : 0;
}

}  // namespace kpipe::runtime
