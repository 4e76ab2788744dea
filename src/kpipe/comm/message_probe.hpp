#pragma once
// What a pipeline message costs, measured on the run's own transport, for the simulator's price of a message
// (schedule/costs.hpp: latency + bytes * per_byte).
//
// A pipeline message usually finds its receiver already waiting, and the time that counts is from the send to
// the moment the waiting rank goes on. The probe measures exactly that: between neighbouring stages, one rank
// computes (spins) for a while and sends; its neighbour, waiting meanwhile, answers the same way. A round trip
// less the two pauses is two one-way times, the transport's polling and back-off included. Two sizes (a few
// bytes and the activation message) give the latency and the cost per byte.
#include <mpi.h>
#include <cstddef>
#include <vector>

#include "kpipe/comm/transport.hpp"

namespace kpipe::comm {

struct MessageCost {
  double latency = 0;   // seconds from a send to its waiting receiver going on, for the smallest message
  double per_byte = 0;  // seconds per further byte
  int hops = 0;         // neighbouring pairs measured (0: a pipeline of one rank, whose messages cost nothing)
};

// Collective over `pipeline` (stage k of the pipeline is its rank k): every pair of neighbouring stages
// exchanges `rounds` round trips of 4 bytes and of `bytes` through `transport`, in `buffer` (at least `bytes`
// of kpipe's memory space, overwritten); the medians, averaged over the pairs, are returned on every rank.
// `pause_s`: how long each side computes before it answers, long enough that the other side waits as it does in
// a run. A neighbour that does not answer within timeout_s ends the job (ExitCode::peer_lost).
// The probe's arithmetic, apart from the messages (pure: tested on made-up times).
// One pair's one-way time: the median over round trips (each timed from the opener's send to its receipt of the
// answer, which left `pause_s` after the opener's message arrived) of (round trip - pause) / 2; 0 at least.
double median_one_way(std::vector<double> round_trips, double pause_s);
// The cost from the one-way times summed over `hops` pairs, of the smallest message (`small_bytes`) and of the
// probe's `bytes`: latency = the small message's mean, per_byte = the rest of the large one's per further
// byte (0 where noise makes the large message look faster, or when bytes <= small_bytes).
MessageCost message_cost(double small_sum, double large_sum, int hops, std::size_t small_bytes, std::size_t bytes);

MessageCost measure_message_cost(Transport& transport, const ExecSpace& space, MPI_Comm pipeline, void* buffer,
                                 std::size_t bytes, double pause_s, double timeout_s, int rounds = 9);

}  // namespace kpipe::comm
