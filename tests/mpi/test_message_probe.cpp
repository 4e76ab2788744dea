// The message probe (comm/message_probe.hpp) measures what a message costs on a transport: every neighbouring
// pair of stages is measured once, every rank gets the same figures, and a link made slower by a known delay
// measures at least that delay per message.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "kpipe/comm/message_probe.hpp"
#include "kpipe/comm/transport.hpp"

#include "support/forwarding_transport.hpp"
#include "support/mpi_world.hpp"

namespace kpipe::comm {
namespace {

using test::world_size;

// Every send leaves `delay_s` late: a link with that much more latency.
class DelayingTransport final : public test::ForwardingTransport {
 public:
  DelayingTransport(std::unique_ptr<Transport> inner, double delay_s)
      : ForwardingTransport(std::move(inner)), delay_s_(delay_s) {}
  Transfer send(const ExecSpace& space, const void* data, std::size_t bytes, int peer, int tag) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
    return ForwardingTransport::send(space, data, bytes, peer, tag);
  }

 private:
  double delay_s_;
};

MessageCost probe(Transport& transport, std::size_t bytes) {
  View1<float> buffer("kpipe::test::probe_buffer", bytes / sizeof(float));
  return measure_message_cost(transport, ExecSpace{}, MPI_COMM_WORLD, buffer.data(), bytes, 1e-3, 30.0, 5);
}

// The same figures on every rank (they are the pipeline's, and the simulator runs on each).
void expect_same_on_every_rank(const MessageCost& cost) {
  std::vector<double> mine{cost.latency, cost.per_byte, double(cost.hops)}, first = mine;
  MPI_Bcast(first.data(), int(first.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, first);
}

// The arithmetic on made-up times: a round trip is two one-way times and the pause; the median, not the mean.
TEST(MessageProbe, OneWayTimeIsHalfTheRoundTripLessThePause) {
  // One-way 3 ms, pause 4 ms: round trips of 10 ms, one outlier each way.
  EXPECT_DOUBLE_EQ(median_one_way({10e-3, 10e-3, 50e-3, 10e-3, 4e-3}, 4e-3), 3e-3);
  EXPECT_DOUBLE_EQ(median_one_way({7e-3}, 1e-3), 3e-3);
  EXPECT_EQ(median_one_way({3e-3, 2e-3, 3e-3}, 4e-3), 0.0) << "a clock that ran short costs nothing, not less";
  EXPECT_EQ(median_one_way({}, 1e-3), 0.0);
}

TEST(MessageProbe, LatencyIsTheSmallMessageAndPerByteTheRest) {
  // Two pairs: small messages 10 and 20 us one way; 1 MiB + 4 bytes messages 1 ms more each.
  const std::size_t bytes = (1 << 20) + 4;
  const MessageCost cost = message_cost(30e-6, 30e-6 + 2e-3, 2, 4, bytes);
  EXPECT_EQ(cost.hops, 2);
  EXPECT_DOUBLE_EQ(cost.latency, 15e-6);
  EXPECT_DOUBLE_EQ(cost.per_byte, 1e-3 / double(1 << 20));
  EXPECT_EQ(message_cost(30e-6, 20e-6, 2, 4, bytes).per_byte, 0.0) << "a large message that looked faster";
  EXPECT_EQ(message_cost(30e-6, 0, 2, 4, 4).per_byte, 0.0) << "one size: all latency";
  const MessageCost none = message_cost(0, 0, 0, 4, bytes);
  EXPECT_EQ(none.latency, 0.0);
  EXPECT_EQ(none.per_byte, 0.0);
}

TEST(MessageProbe, MeasuresEveryNeighbouringPairOnce) {
  MpiTransport transport(MPI_COMM_WORLD, 30.0);
  const MessageCost cost = probe(transport, 64 * 1024);
  EXPECT_EQ(cost.hops, world_size() - 1);
  if (world_size() == 1) {
    EXPECT_EQ(cost.latency, 0.0);  // no messages: nothing to charge
    EXPECT_EQ(cost.per_byte, 0.0);
  } else {
    // Ranks on one host: a message takes some time, and (however oversubscribed the cores) far less than the
    // 50 ms a unit slip (milliseconds read as seconds, a round trip not halved with its pause) would show.
    EXPECT_GT(cost.latency, 0.0);
    EXPECT_LT(cost.latency, 50e-3);
    EXPECT_LT(cost.per_byte * 64 * 1024, 50e-3);
  }
  expect_same_on_every_rank(cost);
}

TEST(MessageProbe, ASlowerLinkMeasuresItsDelay) {
  if (world_size() == 1) GTEST_SKIP() << "one rank sends no messages";
  // Long beside the noise of ranks sharing cores (a few ms with 4 ranks on 2), so that both bounds hold.
  constexpr double delay = 30e-3;
  DelayingTransport transport(std::make_unique<MpiTransport>(MPI_COMM_WORLD, 30.0), delay);
  const MessageCost cost = probe(transport, 4096);
  // Each message leaves `delay` late; the small and the large message alike, so it is all latency: at least the
  // delay, and under two (a round trip not halved reads as two at least). The MPI tests run alone (ctest's
  // PROCESSORS), so the ranks' own scheduling noise is the slack.
  EXPECT_GE(cost.latency, delay);
  EXPECT_LT(cost.latency, 1.9 * delay);
  EXPECT_LT(cost.per_byte * 4096, 0.25 * delay) << "the delay is per message, not per byte";
  expect_same_on_every_rank(cost);
}

}  // namespace
}  // namespace kpipe::comm
