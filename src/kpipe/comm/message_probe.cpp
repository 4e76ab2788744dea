#include "kpipe/comm/message_probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/clock.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/fence.hpp"

namespace kpipe::comm {

namespace {

// The probe's tag. Nothing else is in flight while it runs (it is collective, between runs of lists), and
// kpipe's own tags are small (schedule::message_tag), the bounded collectives' the largest MPI allows.
constexpr int probe_tag = 32000;

// Busy, as a rank computing is: a sleep would hand the core to the neighbour and time the scheduler instead.
void compute_for(double seconds) {
  const double end = seconds_now() + seconds;
  while (seconds_now() < end) {
  }
}

struct Pair {
  int peer = -1;       // the neighbour, or -1: this rank sits the phase out
  bool opens = false;  // this rank sends first and times the round trips
};

// Phase 0 pairs stages (0, 1), (2, 3), ...; phase 1 pairs (1, 2), (3, 4), ...: every neighbouring pair once,
// no rank in two pairs at a time.
Pair pair_in_phase(int stage, int stages, int phase) {
  const bool opens = (stage % 2) == phase;
  const int peer = opens ? stage + 1 : stage - 1;
  if (peer < 0 || peer >= stages) return {};
  return {peer, opens};
}

class Prober {
 public:
  Prober(Transport& transport, const ExecSpace& space, void* buffer, double pause_s, double timeout_s, int stage)
      : transport_(transport), space_(space), buffer_(buffer), pause_s_(pause_s), timeout_s_(timeout_s),
        stage_(stage) {}

  // The opener's median one-way time over `rounds` round trips of `bytes` (after one that warms the path up);
  // the answering side returns 0.
  double one_way(const Pair& pair, std::size_t bytes, int rounds) {
    std::vector<double> round_trips;
    for (int r = 0; r <= rounds; ++r) {
      if (pair.opens) {
        compute_for(pause_s_);
        const double start = seconds_now();
        send(pair.peer, bytes);
        receive(pair.peer, bytes);
        if (r > 0) round_trips.push_back(seconds_now() - start);
      } else {
        receive(pair.peer, bytes);
        compute_for(pause_s_);
        send(pair.peer, bytes);
      }
    }
    return pair.opens ? median_one_way(std::move(round_trips), pause_s_) : 0.0;
  }

 private:
  // The buffer both sends and receives: each completes before the other starts.
  void send(int peer, std::size_t bytes) {
    Transfer t = transport_.send(space_, buffer_, bytes, peer, probe_tag);
    complete(t, peer);
  }
  void receive(int peer, std::size_t bytes) {
    Transfer t = transport_.recv(space_, buffer_, bytes, peer, probe_tag);
    complete(t, peer);
  }
  void complete(Transfer& t, int peer) {
    if (!transport_.wait(space_, t, timeout_s_))
      abort_job(ExitCode::peer_lost, fmt::format("stage {}: stage {} did not answer the message probe within "
                                                 "{} s (pipeline.recv_timeout_s); aborting",
                                                 stage_, peer, timeout_s_));
    named_fence(space_, "kpipe::comm::message_probe: the data is there");  // stream-ordered transports: the data is there once the stream got through
  }

  Transport& transport_;
  ExecSpace space_;
  void* buffer_;
  double pause_s_, timeout_s_;
  int stage_;
};

}  // namespace

// The answer left pause_s after the opener's message arrived: what remains of a round trip is the two messages.
double median_one_way(std::vector<double> round_trips, double pause_s) {
  if (round_trips.empty()) return 0;
  for (double& t : round_trips) t = (t - pause_s) / 2;
  const auto middle = round_trips.begin() + std::ptrdiff_t(round_trips.size() / 2);
  std::nth_element(round_trips.begin(), middle, round_trips.end());
  return std::max(0.0, *middle);
}

MessageCost message_cost(double small_sum, double large_sum, int hops, std::size_t small_bytes, std::size_t bytes) {
  MessageCost cost;
  cost.hops = hops;
  if (hops == 0) return cost;
  cost.latency = small_sum / hops;
  // Noise can make the larger message look faster: then every message costs the latency.
  if (bytes > small_bytes) cost.per_byte = std::max(0.0, (large_sum / hops - cost.latency) / double(bytes - small_bytes));
  return cost;
}

MessageCost measure_message_cost(Transport& transport, const ExecSpace& space, MPI_Comm pipeline, void* buffer,
                                 std::size_t bytes, double pause_s, double timeout_s, int rounds) {
  int stage = 0, stages = 1;
  MPI_Comm_rank(pipeline, &stage);
  MPI_Comm_size(pipeline, &stages);
  constexpr std::size_t small = 4;
  Prober prober(transport, space, buffer, pause_s, timeout_s, stage);
  // Summed over the pairs this rank opened: small-message time, large-message time, pairs.
  std::vector<double> sums(3, 0.0);
  for (int phase = 0; phase < 2; ++phase) {
    const Pair pair = pair_in_phase(stage, stages, phase);
    if (pair.peer < 0) continue;
    sums[0] += prober.one_way(pair, std::min(small, bytes), rounds);
    sums[1] += bytes > small ? prober.one_way(pair, bytes, rounds) : 0.0;
    sums[2] += pair.opens ? 1 : 0;
  }
  allreduce(sums, MPI_SUM, pipeline, {timeout_s, "the message probe's sums"});
  return message_cost(sums[0], sums[1], int(sums[2]), std::min(small, bytes), bytes);
}

}  // namespace kpipe::comm
