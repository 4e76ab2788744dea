#pragma once
// A bound on a section of code that may wait for other ranks where kpipe cannot poll: MPI calls that have no
// non-blocking form (MPI_Finalize, MPI_Comm_split_type). A helper thread waits for the
// section to end; when it does not within the bound, the thread says what this rank was doing and ends the
// process, which ends the MPI job (mpiexec takes every rank down when one exits before MPI_Finalize).
// The thread calls no MPI function.
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "kpipe/comm/bounded.hpp"

namespace kpipe::comm {

class Watchdog {
 public:
  // Watches from now until destruction. `rank` is the world rank named in the message.
  Watchdog(int rank, Bound bound);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable ended_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace kpipe::comm
