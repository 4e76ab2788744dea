// Bounded collectives (run with -n 1, 2 and 4): the same results as MPI's own, on the world and on
// sub-communicators, many in a row (the "arrived" messages stay matched), and left under way while others
// run; agreement on the lowest failing rank's message. (A rank that stops is tested end to end: tests/e2e/stall.sh.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <new>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/deadline.hpp"
#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/error.hpp"

namespace kpipe {
namespace {

const comm::Bound bound{60, "a test collective"};

// A timeout past the steady clock's 64-bit nanoseconds (about 9.2e9 s) is the longest one, not an overflow
// into the past: a collective and a watchdog with 1e300 s wait as long as their work takes (a watchdog that
// fired would end this process with exit code 3).
TEST(Bounded, TimeoutsPastTheClocksRangeAreTheLongestNotAnOverflow) {
  const auto now = std::chrono::steady_clock::now();
  const auto longest = comm::deadline_after(max_timeout_s, now);
  EXPECT_EQ(comm::deadline_after(1e300, now), longest);
  EXPECT_EQ(comm::deadline_after(HUGE_VAL, now), longest);
  EXPECT_EQ(comm::deadline_after(-1, now), now);
  EXPECT_EQ(comm::deadline_after(std::nan(""), now), now);
  EXPECT_NEAR(std::chrono::duration<double>(longest - now).count(), max_timeout_s, 1e-3);
  {
    const comm::Watchdog watch(0, {1e300, "a test's wait"});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(comm::allreduce(1, MPI_SUM, MPI_COMM_WORLD, {1e300, "a collective with the longest bound"}), 0);
}

TEST(Bounded, CollectivesGiveMpisResults) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int round = 0; round < 50; ++round) {
    std::vector<double> values = {double(rank), 1.0, double(round)};
    comm::allreduce(values, MPI_SUM, MPI_COMM_WORLD, bound);
    EXPECT_EQ(values[0], size * (size - 1) / 2.0);
    EXPECT_EQ(values[1], size);
    EXPECT_EQ(values[2], double(round) * size);
    EXPECT_EQ(comm::allreduce(rank, MPI_MAX, MPI_COMM_WORLD, bound), size - 1);
    comm::barrier(MPI_COMM_WORLD, bound);
  }
  EXPECT_EQ(comm::bcast(rank == size - 1 ? std::string("from the last") : std::string(), size - 1, MPI_COMM_WORLD, bound),
            "from the last");
  const auto all = comm::allgather(std::vector<int>{rank, -rank}, MPI_COMM_WORLD, bound);
  ASSERT_EQ(all.size(), std::size_t(2 * size));
  for (int r = 0; r < size; ++r) EXPECT_EQ(all[2 * r + 1], -r);
}

// Allreduces left under way while the rank works, others started and finished meanwhile, completed later in
// the order started: each gives its own sum (the arrival messages of each stay matched to it).
TEST(Bounded, PendingAllreducesCompleteWithTheirOwnSums) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int round = 0; round < 20; ++round) {
    comm::PendingAllreduce<double> first({double(rank), double(round)}, MPI_SUM, MPI_COMM_WORLD, bound);
    comm::PendingAllreduce<int> second({rank}, MPI_MAX, MPI_COMM_WORLD, bound);
    EXPECT_TRUE(first.under_way());
    // Work in between, and a blocking collective started after them.
    EXPECT_EQ(comm::allreduce(1, MPI_SUM, MPI_COMM_WORLD, bound), size);
    comm::PendingAllreduce<double> moved = std::move(first);  // the values move with it
    EXPECT_FALSE(first.under_way());
    const auto sums = moved.wait();
    EXPECT_FALSE(moved.under_way());
    ASSERT_EQ(sums.size(), 2u);
    EXPECT_EQ(sums[0], size * (size - 1) / 2.0);
    EXPECT_EQ(sums[1], double(round) * size);
    EXPECT_EQ(second.wait(), std::vector<int>{size - 1});
  }
}

TEST(Bounded, VariableLengthGathersKeepRankOrder) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string mine(std::size_t(rank + 1), char('a' + rank));
  std::vector<int> counts;
  const std::string all = comm::allgatherv(mine, MPI_COMM_WORLD, bound, &counts);
  std::string expected;
  for (int r = 0; r < size; ++r) expected += std::string(std::size_t(r + 1), char('a' + r));
  EXPECT_EQ(all, expected);
  EXPECT_EQ(counts.size(), std::size_t(size));
  const std::vector<std::int64_t> values(std::size_t(rank), rank);
  const auto gathered = comm::gatherv(values, 0, MPI_COMM_WORLD, bound, &counts);
  if (rank == 0) {
    EXPECT_EQ(gathered.size(), std::size_t(size * (size - 1) / 2));
    for (int r = 0; r < size; ++r) EXPECT_EQ(counts[r], r);
  } else {
    EXPECT_TRUE(gathered.empty());
  }
}

TEST(Bounded, SubCommunicatorsHaveTheirOwnRoot) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  for (int round = 0; round < 20; ++round) {
    const int sum = comm::allreduce(1, MPI_SUM, half, bound);
    int expected = 0;
    MPI_Comm_size(half, &expected);
    EXPECT_EQ(sum, expected);
  }
  MPI_Comm_free(&half);
}

TEST(Agree, EveryRankGetsTheLowestFailingRanksMessage) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_NO_THROW(comm::agree(MPI_COMM_WORLD, bound, [] {}));
  // The last rank alone fails (as rank 0 alone fails to open --metrics): every rank throws its message.
  try {
    comm::agree(MPI_COMM_WORLD, bound, [&] {
      if (rank == size - 1) throw InputError("output.metrics = 'x': cannot write");
    });
    ADD_FAILURE() << "no rank threw";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "output.metrics = 'x': cannot write");
  }
  // Several fail: the lowest one's message, and its rank.
  const comm::Failure agreed = comm::first_failure(
      MPI_COMM_WORLD, rank >= size / 2 ? comm::Failure{7, rank, "rank " + std::to_string(rank)} : comm::Failure{},
      bound);
  EXPECT_EQ(agreed.code, 7);
  EXPECT_EQ(agreed.rank, size / 2);
  EXPECT_EQ(agreed.message, "rank " + std::to_string(size / 2));
}

// What failed keeps its kind: bad input stays bad input (exit 2), anything else (out of memory, a system
// failure) becomes an AgreedFailure on every rank (exit 1), reported once.
TEST(Agree, EveryRankGetsTheFailuresKind) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const auto agreed_failure = [&](const std::function<void()>& last_rank_fails) -> std::string {
    try {
      comm::agree(MPI_COMM_WORLD, bound, [&] {
        if (rank == size - 1) last_rank_fails();
      });
    } catch (const InputError& e) {
      return std::string("bad input: ") + e.what();
    } catch (const comm::AgreedFailure& e) {
      return std::string("failure: ") + e.what();
    }
    return "none";
  };
  EXPECT_EQ(agreed_failure([] { throw std::bad_alloc(); }), "failure: out of memory");
  EXPECT_EQ(agreed_failure([] { throw std::runtime_error("disk on fire"); }), "failure: disk on fire");
  EXPECT_EQ(agreed_failure([] { throw InputError("model.n_layers = 0"); }), "bad input: model.n_layers = 0");
}

}  // namespace
}  // namespace kpipe
