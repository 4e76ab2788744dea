#pragma once
// Event-driven simulation of one step of a schedule: predicts makespan, idle time per rank (the bubble) and
// peak activation memory, the figures the runtime measures on a real run. It is the schedule interpreter's
// timed mode (interpret.hpp), which says what waits for what.
//
// Model: every rank runs its actions in order, one at a time. A compute action starts when its rank is
// free and its input is there; it takes the cost of its kind (per chunk, i.e. per virtual stage). A message
// leaves when the sender reaches its send (sends take no rank time: the network moves the data) and
// arrives latency + activation_bytes * per_byte later; a receive blocks its rank until then. Between virtual
// stages of one rank the handoff is immediate. It prices planned lists (plan.hpp), lowered and validated by
// the pass pipeline, never lists of its own making: a plan for stream-ordered delivery (NCCL) is priced on its
// own lists, whose receives the stream-order pass placed where NCCL runs them.
//
// Data-parallel replicas (reduction.hpp) run side by side. The ordered reduction's running sum is a message
// of gradient_bytes between replicas; a replica receives it only once the sum it sent before has been
// received (the runtime receives into the buffer it sent from). The optimizer step S of a stage starts when
// every replica of that stage has reached it, after the final reduction: a broadcast of the last sum
// (ordered) or an allreduce, each modelled as ceil(log2 replicas) (resp. twice that) transfers of the
// gradients.
//
// Asynchronous schedules (asynchronous.hpp) run their lists of several steps through: S is a step boundary
// that costs nothing and waits for nothing (the host's collectives there are not priced), each update U
// costs `step` (the optimizer on one chunk) and, with replicas, starts when every replica of the stage has
// reached the same update, after the reduction (as S above). Their figures of interest are the steady
// state's: steady_idle_fraction and steady_bubble cover the steps that repeat, between the warm-up and the
// last step's drain (asynchronous.hpp's Horizon::template_step on).
#include <cstddef>
#include <string>
#include <vector>

#include "kpipe/schedule/costs.hpp"
#include "kpipe/schedule/interpret.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct Plan;
struct Replicated;

struct SimResult {
  double makespan = 0;               // the last action's end
  std::vector<double> busy;          // compute time per rank (F, B, I, W, S)
  std::vector<double> idle_fraction; // 1 - busy / makespan, per rank
  double bubble = 0;                 // mean idle fraction
  std::vector<int> peak_stash;       // see validate.hpp's peak_stash
  std::vector<std::vector<Span>> timeline;  // per rank: its compute actions, updates and step(s), in order
  // Per rank: when each step ended (its S). Synchronous schedules: one step.
  std::vector<std::vector<double>> step_ends;
  // The steady state: per rank the idle fraction from the end of step `steady_first - 1` (or the start) to
  // the end of step `steady_last`, and its mean; the time per step there (rank 0's steps: the step time
  // kpipe-train measures). Synchronous schedules: the whole step, as above (the makespan).
  int steady_first = 0, steady_last = 0;
  std::vector<double> steady_idle_fraction;
  double steady_bubble = 0;
  double steady_step = 0;
  std::vector<int> versions_held;    // per rank: the most weight versions one chunk holds (versions.hpp)
};

// What runs (plan.hpp), as it runs (interpret.hpp's timed mode): every replica together, the result's per-rank
// vectors indexed by world rank, replica * ranks + rank. Compute costs per rank, or per virtual stage (stages
// are rarely equal: the first holds the embedding, the last the head, and with several chunks per rank each
// chunk has its own): costs.size() is the ranks of a pipeline (a rank's chunks cost alike) or its virtual
// stages, alike in every replica; messages cost what costs[0] says; costs must be non-negative. The plan's
// lists were validated when it was made and are not validated again.
SimResult simulate(const Plan& plan, const std::vector<Costs>& costs);

// One pipeline's lists (compute-only or lowered; no replicas), planned first on a buffered delivery
// (plan(): InputError when invalid), then simulated: for tests and tools that price a schedule of their own.
SimResult simulate(const Schedule& s, const Costs& costs = {});
SimResult simulate(const Schedule& s, const std::vector<Costs>& costs);

}  // namespace kpipe::schedule
