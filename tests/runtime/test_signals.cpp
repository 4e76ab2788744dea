// Stop signals: what the handlers record, which signal wins, and the exit code each one leads to.
#include <gtest/gtest.h>

#include <csignal>

#include "kpipe/runtime/signals.hpp"

namespace kpipe::runtime {
namespace {

TEST(StopSignals, ExitCodes) {
  EXPECT_EQ(stop_exit_code(SIGUSR1), 75);  // checkpointed: requeue me
  EXPECT_EQ(stop_exit_code(SIGTERM), 143);  // terminated, as a shell reports it: not to be requeued
}

TEST(StopSignals, HandlersRecordAndSigtermSticks) {
  install_stop_handlers();
  reset_stop_signal();
  EXPECT_EQ(received_stop_signal(), 0);
  EXPECT_EQ(stop_requested(MPI_COMM_WORLD, 10), 0);
  std::raise(SIGUSR1);  // recorded, not fatal
  EXPECT_EQ(received_stop_signal(), SIGUSR1);
  EXPECT_EQ(stop_requested(MPI_COMM_WORLD, 10), SIGUSR1);
  std::raise(SIGTERM);
  EXPECT_EQ(received_stop_signal(), SIGTERM);
  std::raise(SIGUSR1);  // a later USR1 does not turn "end the job" into "requeue me"
  EXPECT_EQ(received_stop_signal(), SIGTERM);
  EXPECT_EQ(stop_requested(MPI_COMM_WORLD, 10), SIGTERM);
  reset_stop_signal();
  EXPECT_EQ(received_stop_signal(), 0);
}

}  // namespace
}  // namespace kpipe::runtime
