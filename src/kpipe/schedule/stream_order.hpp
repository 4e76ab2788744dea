#pragma once
// What a stream-ordered transport (NCCL, routes.hpp) needs of a lowered schedule: a pass that arranges it,
// and a proof that it is safe, before anything runs.
//
// On NCCL each rank issues its messages in list order on one CUDA stream, where everything runs in order, and
// an NCCL send may block until the peer's matching receive has been issued. The executor posts every run of
// consecutive messages (between two computations) as one NCCL group, whose operations progress together. Two
// properties make that safe, and the proof shows both for every rank (the interpreter's rendezvous mode,
// interpret.hpp):
//  1. Order. NCCL has no tags: the k-th send from rank a to rank b meets the k-th receive at b from a. So,
//     per pair of ranks and direction, the messages a sends must be exactly the ones b receives, in the same
//     order (MPI, which matches by tag, does not care).
//  2. No deadlock. A dry run of all ranks under NCCL's semantics: a rank goes past a group only when every
//     message in it has met its partner, which happens once both ends' groups have been issued (each rank has
//     reached the group holding its end). Sends are not buffered (validate()'s dry run buffers them).
//     Asynchronous lists' step boundaries S are barriers (between steps every rank's host enters
//     collectives): no send may be left waiting at a step's end for a receive its peer issues only in its
//     next step.
// A violation is an InputError naming the rank, the position (index in its list) and the action, e.g.
//   schedule rank 1 position 4 (ra2<0): NCCL matches messages in order: this is receive 1 from rank 0, but
//   rank 0's send 1 to rank 1 is sa1>1 (position 3)
#include <string>

#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/routes.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// The pass that makes a lowered schedule safe under NCCL. Where a send would wait for a receive that its
// peer reaches only after a send of its own that waits for us (a cycle that MPI's buffered sends never
// notice, e.g. GPipe or interleaved schedules, whose chunks pass activations both ways between two ranks),
// the receive moves earlier, to the end of the peer's group that is being run, where the two meet. Where the
// peer is held at an asynchronous step boundary S (PipeDream and 2BW forward, in a step's last 1F1B pairs,
// micro-batches of the next step, whose activations the next stage receives only in its next step), the
// receive moves before that S, so that the message is delivered within the step that sends it. A receive
// only ever moves earlier, so its data still arrives before the action that uses it, and it lands in a spare
// buffer as any receive does (buffers.hpp counts it). Schedules that need no move come back unchanged (1F1B,
// ZB-H1).
Schedule order_for_streams(const Schedule& s);

// The proof for one pipeline (s: lowered and validated, validate()): why it does not hold, or "".
std::string stream_order_violation(const Schedule& s);
// The same, as an InputError.
void validate_stream_order(const Schedule& s);

// Data-parallel replicas (reduction.hpp): the pass on every replica's pipeline, and the proof over all of
// them together, the pipelines' messages on NCCL and the ordered reduction's running sums as messages too,
// carried either
//  - on the stream (SumRoute::ordered_on_transport): on each rank's communicator of replicas, per pair and
//    direction, the sums sent and received must be the same (chunk, group) in the same order, and in the dry
//    run a sum is a group of its own whose send waits for its receive, as an ncclSend on the stream does; or
//  - by MPI from the host (SumRoute::ordered_by_mpi): tagged by (chunk, group), a send that never waits, a
//    receive that waits for its send.
// A sum on the stream blocks it, so a replica that sends its sum on can hold up its own pipeline, which a
// peer's waits on: 1F1B with 2 ranks and 2 replicas already closes such a cycle, and plan() then has the sums
// go by MPI (plan.hpp). The final broadcast or all-reduce comes after every list, on every replica alike; an
// asynchronous update waits for its stage's replicas. Violations name the replica, rank, position and action.
Replicated order_for_streams(const Replicated& r);
std::string stream_order_violation(const Replicated& r, SumRoute sums);
void validate_stream_order(const Replicated& r, SumRoute sums = SumRoute::ordered_on_transport);

// The runtime's names for the two routes of the ordered sums, until it takes its lists from plan() (which
// decides the route itself): stream = SumRoute::ordered_on_transport, mpi = SumRoute::ordered_by_mpi.
enum class SumTransport { stream, mpi };
void validate_stream_order(const Replicated& r, SumTransport sums);

}  // namespace kpipe::schedule
