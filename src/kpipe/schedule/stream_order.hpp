#pragma once
// What a stream-ordered transport (NCCL) needs of a lowered schedule: a pass that arranges it, and a check
// that proves it, before anything runs.
//
// On NCCL each rank issues its messages in list order on one CUDA stream, where everything runs in order, and
// an NCCL send may block until the peer's matching receive has been issued. The executor posts every run of
// consecutive messages (between two computations) as one NCCL group, whose operations progress together. Two
// properties make that safe, and validate_stream_order() proves both for every rank:
//  1. Order. NCCL has no tags: the k-th send from rank a to rank b meets the k-th receive at b from a. So,
//     per pair of ranks and direction, the messages a sends must be exactly the ones b receives, in the same
//     order (MPI, which matches by tag, does not care).
//  2. No deadlock. A dry run of all ranks under NCCL's semantics: a rank goes past a group only when every
//     message in it has met its partner, which happens once both ends' groups have been issued (each rank has
//     reached the group holding its end). Sends are not buffered (validate()'s dry run buffers them).
// A violation is an InputError naming the rank, the position (index in its list) and the action, e.g.
//   schedule rank 1 position 4 (ra2<0): NCCL matches messages in order: this is receive 1 from rank 0, but
//   rank 0's send 1 to rank 1 is sa1>1 (position 3)
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// The pass that makes a lowered schedule safe under NCCL: where a send would wait for a receive that its peer
// reaches only after a send of its own that waits for us (a cycle that MPI's buffered sends never notice,
// e.g. GPipe or interleaved schedules, whose chunks pass activations both ways between two ranks), the
// receive moves earlier, to the end of the peer's group that is being run, where the two meet. A receive
// only ever moves earlier, so its data still arrives before the action that uses it, and it lands in a spare
// buffer as any receive does. Schedules that need no move come back unchanged (1F1B, ZB-H1).
Schedule order_for_streams(const Schedule& s);

// s: lowered and validated (validate()). Throws InputError on the first violation.
void validate_stream_order(const Schedule& s);

// Data-parallel replicas (reduction.hpp): the pass on every replica's pipeline, and the proof over all of
// them together, the pipelines' messages on NCCL and the ordered reduction's running sums as messages too,
// carried either
//  - on the stream (SumTransport::stream, NCCL): on each rank's communicator of replicas, per pair and
//    direction, the sums sent and received must be the same (chunk, group) in the same order, and in the dry
//    run a sum is a group of its own whose send waits for its receive, as an ncclSend on the stream does; or
//  - by MPI from the host (SumTransport::mpi): tagged by (chunk, group), a send that never waits, a receive
//    that waits for its send.
// A sum on the stream blocks it, so a replica that sends its sum on can hold up its own pipeline, which a
// peer's waits on: 1F1B with 2 ranks and 2 replicas already closes such a cycle, and the runtime then carries
// the sums by MPI (runtime/gradient_reduction.hpp). The final broadcast or all-reduce comes after every list,
// on every replica alike. Violations name the replica, rank, position and action.
enum class SumTransport { stream, mpi };
Replicated order_for_streams(const Replicated& r);
void validate_stream_order(const Replicated& r, SumTransport sums = SumTransport::stream);

}  // namespace kpipe::schedule
