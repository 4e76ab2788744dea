// Stop signals: what the handlers record, which signal wins (on one rank, and over the world's summed votes),
// and the exit code each one leads to.
#include <gtest/gtest.h>

#include <csignal>
#include <vector>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/runtime/signals.hpp"

namespace kpipe::runtime {
namespace {

// What every rank agrees on from its own signal, as a step report carries it.
int agreed_over_world(int signal) {
  const auto mine = stop_votes(signal);
  std::vector<double> votes(mine.begin(), mine.end());
  comm::allreduce(votes, MPI_SUM, MPI_COMM_WORLD, {10, "the test's vote"});
  return agreed_stop_signal({votes[0], votes[1]});
}

TEST(StopSignals, ExitCodes) {
  EXPECT_EQ(stop_exit_code(SIGUSR1), 75);  // checkpointed: requeue me
  EXPECT_EQ(stop_exit_code(SIGTERM), 143);  // terminated, as a shell reports it: not to be requeued
}

TEST(StopSignals, HandlersRecordAndSigtermSticks) {
  install_stop_handlers();
  reset_stop_signal();
  EXPECT_EQ(received_stop_signal(), 0);
  EXPECT_EQ(agreed_over_world(received_stop_signal()), 0);
  std::raise(SIGUSR1);  // recorded, not fatal
  EXPECT_EQ(received_stop_signal(), SIGUSR1);
  EXPECT_EQ(agreed_over_world(received_stop_signal()), SIGUSR1);
  std::raise(SIGTERM);
  EXPECT_EQ(received_stop_signal(), SIGTERM);
  std::raise(SIGUSR1);  // a later USR1 does not turn "end the job" into "requeue me"
  EXPECT_EQ(received_stop_signal(), SIGTERM);
  EXPECT_EQ(agreed_over_world(received_stop_signal()), SIGTERM);
  reset_stop_signal();
  EXPECT_EQ(received_stop_signal(), 0);
}

TEST(StopSignals, SigtermWinsAcrossRanks) {
  // One rank's SIGTERM against any number of SIGUSR1s: ended, not requeued; no vote: no stop.
  EXPECT_EQ(agreed_stop_signal({0, 0}), 0);
  EXPECT_EQ(agreed_stop_signal({0, 3}), SIGUSR1);
  EXPECT_EQ(agreed_stop_signal({1, 3}), SIGTERM);
  EXPECT_EQ(agreed_stop_signal({2, 0}), SIGTERM);
  const auto usr1 = stop_votes(SIGUSR1), term = stop_votes(SIGTERM), none = stop_votes(0);
  EXPECT_EQ(agreed_stop_signal({usr1[0] + term[0] + none[0], usr1[1] + term[1] + none[1]}), SIGTERM);
  EXPECT_EQ(agreed_stop_signal({usr1[0] + none[0], usr1[1] + none[1]}), SIGUSR1);
}

}  // namespace
}  // namespace kpipe::runtime

