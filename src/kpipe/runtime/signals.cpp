#include "kpipe/runtime/signals.hpp"

#include <csignal>

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

int stop_requested(MPI_Comm world) {
  int local = stop_signal, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, world);
  return any;
}

}  // namespace kpipe::runtime
