#pragma once
// Event-driven simulation of one step of a schedule: predicts makespan, idle time per rank (the bubble) and
// peak activation memory, the figures the runtime measures on a real run.
//
// Model: every rank runs its actions in order, one at a time. A compute action starts when its rank is
// free and its input is there; it takes the cost of its kind (per chunk, i.e. per virtual stage). A message
// leaves when the sender reaches its send (sends take no rank time: the network moves the data) and
// arrives latency + activation_bytes * per_byte later; a receive blocks its rank until then. Between virtual
// stages of one rank the handoff is immediate. Compute-only schedules are lowered first.
//
// Data-parallel replicas (reduction.hpp) run side by side. The ordered reduction's running sum is a message
// of gradient_bytes between replicas; a replica receives it only once the sum it sent before has been
// received (the runtime receives into the buffer it sent from). The optimizer step S of a stage starts when
// every replica of that stage has reached it, after the final reduction: a broadcast of the last sum
// (ordered) or an allreduce, each modelled as ceil(log2 replicas) (resp. twice that) transfers of the
// gradients.
#include <cstddef>
#include <string>
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct Replicated;

// Time of each action for one micro-batch on one chunk (one virtual stage), in any unit.
struct Costs {
  double f = 1;        // forward
  double b = 2;        // full backward
  double i = 1;        // backward for the input
  double w = 1;        // backward for the weights
  double r = 0;        // recomputation of what the forward dropped, paid by every B and I (memory.recompute)
  double step = 0;     // optimizer step
  double latency = 0;  // per message
  double per_byte = 0; // per byte of a message
  double activation_bytes = 0;  // size of an activation (and of its gradient)
  double gradient_bytes = 0;    // size of the chunk's weight gradients (the running sum between replicas)
};

struct Span {
  Action action;
  double start = 0, end = 0;
};

struct SimResult {
  double makespan = 0;               // the last action's end
  std::vector<double> busy;          // compute time per rank (F, B, I, W, S)
  std::vector<double> idle_fraction; // 1 - busy / makespan, per rank
  double bubble = 0;                 // mean idle fraction
  std::vector<int> peak_stash;       // see validate.hpp's peak_stash
  std::vector<std::vector<Span>> timeline;  // per rank: its compute actions and step, in order
};

// Validates the schedule first (InputError when invalid); costs must be non-negative.
SimResult simulate(const Schedule& s, const Costs& costs = {});
// The same with compute costs per rank, or per virtual stage (stages are rarely equal: the first holds the
// embedding, the last the head, and with several chunks per rank each chunk has its own): costs.size() is
// s.ranks (a rank's chunks cost alike) or s.virtual_stages(). Messages cost what costs[0] says.
SimResult simulate(const Schedule& s, const std::vector<Costs>& costs);
// Every replica together; the result's per-rank vectors are indexed by world rank, replica * ranks + rank.
// Costs as above, alike in every replica.
SimResult simulate(const Replicated& r, const std::vector<Costs>& costs);

double duration(Op op, const Costs& costs);  // 0 for messages

namespace detail {
// Runs the replicas' lowered lists together (the simulation, and with unit costs the validator's dry run).
// Returns the result so far and, per world rank, the position where it got stuck (list size when done).
struct WorldRun {
  SimResult result;
  std::vector<std::size_t> stopped_at;
  std::vector<std::string> waiting_for;  // per world rank: what the stuck action waits for
};
WorldRun run_world(const std::vector<Schedule>& lowered, bool ordered, const std::vector<Costs>& costs);
}  // namespace detail

}  // namespace kpipe::schedule
