#pragma once
// The one interpreter of schedules. The validator's dry run (validate.hpp, reduction.hpp), the stream-order
// proof and pass (stream_order.hpp) and the simulator (simulate.hpp) all run lists through it, so that they
// agree on what blocks.
//
// Every process (replica, rank) runs its list in order, one action at a time. An action starts when its
// process is free and its input is there:
//  - F, B, I: from a virtual stage of the same rank, once that stage's action has run (compute-only lists:
//    from any rank, there being no messages); W, U and S need nothing more, except that with replicas an
//    update U waits until every replica of its stage has reached it (the replicas' sum before it) and a
//    synchronous step S until every replica of its stage has reached its S (the final reduction);
//  - the ordered reduction's running sums (reduction.hpp), when the lists are interpreted as replicas: a
//    receive waits for its sum and, as the runtime receives into the buffer its previous send read, for that
//    send's receipt.
// Three modes:
//  - buffered (MPI), a dry run: a send never waits; a receive waits until its message, matched by what it
//    carries, has been sent. The validator's.
//  - rendezvous (stream-ordered delivery, NCCL), a dry run: every run of consecutive pipeline messages is one
//    group, and a running sum on the stream a group of its own; the k-th send from a to b meets the k-th
//    receive at b from a; a message meets its partner once both ends' groups are issued (each process has
//    reached the group holding its end), and a process goes past a group when all its messages have met
//    theirs. Asynchronous lists' step boundaries S are barriers of every process: between steps every rank's
//    host enters collectives (loss sums, stop signals), so a send left waiting on the stream for a receive its
//    peer posts only in its next step holds its rank at the barrier, and the run stops there. The running
//    sums can go by MPI instead (buffered, matched by chunk and group) while the pipeline's messages
//    rendezvous. The stream-order proof's and pass's.
//  - timed: buffered, each computation taking its cost (costs.hpp, per virtual stage) and each message
//    latency + bytes x per_byte from its send; sends take no process time and step boundaries wait for
//    nothing (the host's collectives are not priced). The simulator's, for every delivery: a stream-ordered
//    run's lists show their order in where the pass put the receives, and its sends are priced as NCCL's
//    buffers take them, not as the worst case the proof assumes.
//
// A run that cannot finish names every blocked process in one report, the same for every mode:
//   schedule deadlock: rank 0 position 1 (B0) waits for the backward of micro-batch 0 on rank 1; rank 1 ...
//   schedule deadlock in stream order (NCCL: messages in list order, a send waits for its receive): replica 0
//   rank 0 position 2 (ss1>1) waits for replica 1 rank 0 to reach position 3 (rs1<0), but it is held at
//   position 2 (ss2>0); ...
#include <cstddef>
#include <string>
#include <vector>

#include "kpipe/schedule/costs.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/routes.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct Mode {
  Delivery messages = Delivery::buffered;  // the pipeline's sends and receives
  Delivery sums = Delivery::buffered;      // the running sums: by MPI, or on the stream (stream_ordered)
  std::vector<Costs> costs;                // timed (buffered only): one per virtual stage; empty: a dry run

  static Mode buffered() { return {}; }
  // Stream order, the ordered running sums on the stream (SumRoute::ordered_on_transport) or by MPI.
  static Mode rendezvous(SumRoute sums);
  static Mode timed(std::vector<Costs> costs);
};

struct Span {
  Action action;
  double start = 0, end = 0;
};

// A rendezvous message that did not meet its partner: its position, and the partner's process and position.
struct Unmet {
  std::size_t position = 0;
  int peer = 0;
  std::size_t peer_position = 0;
};

// A process that could not finish its list.
struct Blocked {
  int process = 0;         // replica * ranks + rank
  std::size_t position = 0;
  std::string waits_for;   // "the gradient of micro-batch 0 from rank 1"
  std::vector<Unmet> unmet;  // rendezvous: the held group's messages that have not met their partners
};

struct Interpretation {
  int ranks = 1;
  std::vector<std::size_t> stopped_at;  // per process: where it stopped (its list's size when done)
  std::vector<Blocked> blocked;         // empty when every list ran through
  std::string unmatched;  // rendezvous: why the messages cannot be paired in posting order (nothing ran then)
  std::string deadlock;   // the report naming every blocked process; empty when none is
  // Timed runs: per process.
  std::vector<double> busy;                 // computation time (F, B, I, W, U, S)
  std::vector<double> free_at;              // when its last action ended
  std::vector<std::vector<Span>> timeline;  // its computations, updates and step(s), in order
  std::vector<std::vector<double>> step_ends;  // when each step's S ended

  bool finished() const { return unmatched.empty() && deadlock.empty(); }
  // The unmatched or deadlock text (empty when finished).
  const std::string& failure() const { return unmatched.empty() ? deadlock : unmatched; }
};

// One pipeline's lists; running-sum actions in them (a replica's) wait for nothing here.
Interpretation interpret(const Schedule& s, const Mode& mode);
// Every replica together (processes replica * ranks + rank); the ordered reduction's sums are messages.
Interpretation interpret(const Replicated& r, const Mode& mode);

// Throws InputError with run.failure() unless the run finished.
void require_finished(const Interpretation& run);

}  // namespace kpipe::schedule
