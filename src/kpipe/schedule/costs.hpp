#pragma once
// What the timed interpreter (interpret.hpp) charges for each action: the time of each kind of computation
// for one micro-batch on one chunk (one virtual stage), in any unit, and what a message costs.
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct Costs {
  double f = 1;        // forward
  double b = 2;        // full backward
  double i = 1;        // backward for the input
  double w = 1;        // backward for the weights
  double r = 0;        // recomputation of what the forward dropped, paid by every B and I (memory.recompute)
  double step = 0;     // optimizer step (asynchronous schedules: each update U)
  double latency = 0;  // per message
  double per_byte = 0; // per byte of a message
  double activation_bytes = 0;  // size of an activation (and of its gradient)
  double gradient_bytes = 0;    // size of the chunk's weight gradients (the running sum between replicas)
};

// Costs of nothing: every action takes no time (the interpreter's dry runs).
constexpr Costs free_of_cost() { return Costs{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; }

double duration(Op op, const Costs& costs);  // 0 for messages

// InputError naming the cost unless every figure is a non-negative finite number.
void check_costs(const Costs& costs);

}  // namespace kpipe::schedule
