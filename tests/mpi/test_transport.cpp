// Both transports move a buffer intact around a ring of ranks (with one rank, to itself), and a receive
// with no sender times out instead of hanging.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <vector>

#include "kpipe/comm/transport.hpp"

namespace kpipe::comm {
namespace {

template <class Transport> void ring(Transport& transport) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<float> out(1000), in(1000, -1.0f);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = float(rank * 10000 + i);
  Request sent, received;
  const int from = (rank + size - 1) % size, to = (rank + 1) % size;
  transport.recv(in.data(), in.size() * sizeof(float), from, 7, received);
  transport.send(out.data(), out.size() * sizeof(float), to, 7, sent);
  ASSERT_TRUE(transport.wait(received, 30.0));
  ASSERT_TRUE(transport.wait(sent, 30.0));
  EXPECT_FALSE(received.active());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], float(from * 10000 + i)) << i;
}

TEST(Transport, MpiMovesABufferAroundTheRing) {
  MpiTransport transport(MPI_COMM_WORLD);
  ring(transport);
}

TEST(Transport, StagedMovesABufferAroundTheRing) {
  StagedMpiTransport transport(MPI_COMM_WORLD);
  ring(transport);
}

TEST(Transport, ReceiveWithoutSenderTimesOut) {
  MpiTransport transport(MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  float x = 0;
  Request r;
  transport.recv(&x, sizeof x, rank, 99, r);  // nobody sends tag 99
  EXPECT_FALSE(transport.wait(r, 0.05));
  MPI_Cancel(&r.mpi);
  MPI_Wait(&r.mpi, MPI_STATUS_IGNORE);
}

}  // namespace
}  // namespace kpipe::comm
