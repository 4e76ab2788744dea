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

TEST(MessageProbe, MeasuresEveryNeighbouringPairOnce) {
  MpiTransport transport(MPI_COMM_WORLD, 30.0);
  const MessageCost cost = probe(transport, 64 * 1024);
  EXPECT_EQ(cost.hops, world_size() - 1);
  EXPECT_TRUE(std::isfinite(cost.latency) && cost.latency >= 0) << cost.latency;
  EXPECT_TRUE(std::isfinite(cost.per_byte) && cost.per_byte >= 0) << cost.per_byte;
  if (world_size() == 1) {
    EXPECT_EQ(cost.latency, 0.0);  // no messages: nothing to charge
  }
  expect_same_on_every_rank(cost);
}

TEST(MessageProbe, ASlowerLinkMeasuresItsDelay) {
  if (world_size() == 1) GTEST_SKIP() << "one rank sends no messages";
  constexpr double delay = 3e-3;
  DelayingTransport transport(std::make_unique<MpiTransport>(MPI_COMM_WORLD, 30.0), delay);
  const MessageCost cost = probe(transport, 4096);
  // Each message leaves `delay` late; the small and the large message alike, so it is all latency.
  EXPECT_GE(cost.latency, delay);
  expect_same_on_every_rank(cost);
}

}  // namespace
}  // namespace kpipe::comm
