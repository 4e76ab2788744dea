// Both MPI transports move buffers intact around a ring of ranks (with one rank, to itself), reduce and
// broadcast in place, reuse their staging buffers instead of allocating per message, and a receive with no
// sender times out instead of hanging. (The NCCL transport needs GPUs: scripts/gpu-check.sh.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <vector>

#include "kpipe/build_config.hpp"
#include "kpipe/comm/transport.hpp"

#include "support/mpi_world.hpp"

namespace kpipe::comm {
namespace {

using test::world_rank;
using test::world_size;

View1<float> filled(std::size_t n, float first) {
  View1<float> v("v", n);
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < n; ++i) h(i) = first + float(i);
  Kokkos::deep_copy(v, h);
  return v;
}

std::vector<float> on_host(const View1<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

void ring(Transport& transport, int rounds) {
  const int rank = world_rank(), size = world_size();
  const int from = (rank + size - 1) % size, to = (rank + 1) % size;
  ExecSpace space;
  for (int round = 0; round < rounds; ++round) {
    const auto out = filled(1000, float(rank * 10000 + round));
    View1<float> in("in", 1000);
    Transfer received = transport.recv(space, in.data(), in.span() * sizeof(float), from, 7);
    Transfer sent = transport.send(space, out.data(), out.span() * sizeof(float), to, 7);
    ASSERT_TRUE(transport.wait(space, received, 30.0));
    ASSERT_TRUE(transport.wait(space, sent, 30.0));
    EXPECT_FALSE(received.active());
    const auto got = on_host(in);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], float(from * 10000 + round + int(i))) << i;
  }
}

void collectives(Transport& transport) {
  const int rank = world_rank(), size = world_size();
  ExecSpace space;
  auto sum = filled(300, float(rank));
  Transfer t = transport.all_reduce_sum(space, sum.data(), sum.extent(0), Scalar::f32, "the test's all-reduce");
  ASSERT_TRUE(transport.wait(space, t, 30.0));
  const auto total = on_host(sum);
  for (std::size_t i = 0; i < total.size(); ++i)
    ASSERT_EQ(total[i], float(size * (size - 1) / 2) + float(size) * float(i)) << i;
  auto shared = filled(200, float(100 * rank));
  t = transport.broadcast(space, shared.data(), shared.extent(0), Scalar::f32, size - 1, "the test's broadcast");
  ASSERT_TRUE(transport.wait(space, t, 30.0));
  const auto got = on_host(shared);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], float(100 * (size - 1)) + float(i)) << i;
}

TEST(Transport, MpiMovesBuffersAroundTheRing) {
  MpiTransport transport(MPI_COMM_WORLD, 60.0);
  ring(transport, 3);
}

TEST(Transport, StagedMovesBuffersAroundTheRingThroughReusedPinnedBuffers) {
  StagedMpiTransport transport(MPI_COMM_WORLD, 60.0);
  ring(transport, 5);
  // One buffer for the receive and one for the send in flight at a time, whatever the number of messages.
  EXPECT_LE(transport.pinned_buffers(), 2);
  EXPECT_GE(transport.pinned_buffers(), 1);
}

TEST(Transport, MpiReducesAndBroadcastsInPlace) {
  MpiTransport transport(MPI_COMM_WORLD, 60.0);
  collectives(transport);
}

TEST(Transport, StagedReducesAndBroadcastsInPlace) {
  StagedMpiTransport transport(MPI_COMM_WORLD, 60.0);
  collectives(transport);
}

TEST(Transport, ReceiveWithoutSenderTimesOut) {
  auto transport = make_transport(TransportKind::mpi, MPI_COMM_WORLD, 30.0);
  EXPECT_FALSE(transport->stream_ordered());
  ExecSpace space;
  View1<float> x("x", 1);
  Transfer r = transport->recv(space, x.data(), sizeof(float), world_rank(), 99);  // nobody sends tag 99
  EXPECT_FALSE(transport->wait(space, r, 0.05));
  EXPECT_TRUE(r.active());
  // Let it complete, so that the communicator is clean for the next test.
  float one = 1;
  MPI_Send(&one, 1, MPI_FLOAT, world_rank(), 99, MPI_COMM_WORLD);
  EXPECT_TRUE(transport->wait(space, r, 30.0));
}

TEST(Transport, NcclWithoutNcclIsRefused) {
  if (!build::nccl) {
    EXPECT_THROW(make_transport(TransportKind::nccl, MPI_COMM_WORLD, 1.0), std::logic_error);
  }
}

}  // namespace
}  // namespace kpipe::comm
