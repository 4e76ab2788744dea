#pragma once
// Data-parallel replicas of a pipeline schedule, and how they combine their weight gradients: a pass from
// one pipeline's schedule to every replica's, validated and simulated like any schedule.
//
// "ordered" (order_reduction): bit for bit what one rank computes, whose gradient buffer receives the
// micro-batches' weight gradients in global order 0, 1, ..., m-1. The m micro-batches go to the d replicas
// in round-robin groups of g consecutive ones (group q = micro-batches q*g .. q*g+g-1 belongs to replica
// q mod d), and the running sum of each chunk's weight gradients travels from replica to replica once per
// group: after the W's (or B's) of group q-1 its holder sends the sum on (ss), group q's holder receives it
// (rs) right before group q's first W. Every replica's W's stay where its schedule put them, so each
// replica keeps its schedule's activation bound (1F1B's p on the first stage, not all its micro-batches);
// a replica only waits, where the sum has not arrived, for the replicas before it in the round. A B that
// opens a group becomes I, rs, W: the input gradient goes upstream before the wait. The last group's holder
// (replica d-1) broadcasts the final sum. The price is traffic: m/g transfers of the chunk's gradients per
// step, against an allreduce's two; and a replica trails the one before it by about g W's and a transfer.
// With one chunk per rank any g is free of deadlock; with several, the chunks' sums can wait on each other
// once g > 1 (validate() finds it); g = 1 never does: a replica waits only for the replica before it at the
// same place in its list, or (the first replica) for the last one at an earlier place.
//
// "allreduce" (allreduce_replicas): every replica runs the pipeline's lists as they are on contiguous
// micro-batches (replica r: r*m/d ..), and the replicas' sums are added by MPI_Allreduce after the lists:
// fastest, equal to one rank's up to rounding. Asynchronous schedules replicate this way too: there every
// update action U sums the replicas' gradients before it applies them, in replica order (exact) or by
// all-reduce as pipeline.dp_reduction says (runtime/gradient_reduction.hpp).
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct Replicated {
  std::vector<Schedule> replicas;  // one per replica: its pipeline's lists (same shape everywhere)
  bool ordered = false;            // the running sum's actions are in the lists; else an allreduce follows
  int group = 1;                   // ordered: consecutive micro-batches of a replica per reduction group

  int replica_count() const { return int(replicas.size()); }
  int microbatches() const { return replica_count() * replicas.front().microbatches; }  // in all
  int groups() const { return ordered ? microbatches() / group : replica_count(); }
  // The micro-batch of the whole mini-batch that local micro-batch `local` of `replica` is.
  int global_microbatch(int replica, int local) const;
  int group_of(int replica, int local) const;       // ordered: its reduction group
  int holder(int group_index) const { return group_index % replica_count(); }  // ordered: the group's replica

  friend bool operator==(const Replicated& a, const Replicated& b) {
    return a.replicas == b.replicas && a.ordered == b.ordered && a.group == b.group;
  }
  friend bool operator!=(const Replicated& a, const Replicated& b) { return !(a == b); }
};

// The ordered reduction over `replicas` replicas of `pipeline` (compute-only or lowered: the result is in the
// same form), with groups of `group` micro-batches; group must divide pipeline.microbatches (InputError
// naming pipeline.dp_reduction_group). One replica: the pipeline itself.
Replicated order_reduction(const Schedule& pipeline, int replicas, int group);
Replicated allreduce_replicas(const Schedule& pipeline, int replicas);

// Every replica's schedule (validate(Schedule)), the same shape in each, then the running sum: on every
// (replica, rank, chunk) the weight gradients of a group between the receipt of its sum and the send of the
// next one, from and to the right replicas, each group's sum sent and received once; then a dry run of all
// replicas together (the runtime's rule included: a sum is received into the buffer the previous one was
// sent from, so only after that one arrived). InputError naming replica, rank, position and action.
void validate(const Replicated& r);

}  // namespace kpipe::schedule
