#pragma once
// What a step did, as every rank reports it: the figures of one optimizer step (or, asynchronous schedules,
// one step's share of the lists) and the actions this rank ran in it, with their times.
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

struct StepStats {
  std::int64_t step = 0;     // index (from 0) of the optimizer step just taken; users read step_number(step)
  double loss = 0;           // mean per-token loss of the mini-batch (all replicas)
  double lr = 0;
  double grad_norm = 0;      // global L2 norm before clipping
  double seconds = 0;        // wall time of the step on this rank
  double busy_seconds = 0;   // time this rank spent in F, B, I, W (and asynchronous updates)
  double pipeline_seconds = 0;  // time from the step's start to the end of its schedule (before the optimizer)
  double optimizer_seconds = 0; // the optimizer's update on this rank
  std::int64_t tokens = 0;   // tokens in the mini-batch (all replicas)
  bool skipped = false;      // loss or gradient not finite: no update, on every rank alike
  int stop_signal = 0;       // the stop signal the world passed on with this step's report (signals.hpp), or 0
  // A checkpoint write beside the training was still under way on some rank when this step reported (false:
  // every write started before the step is done everywhere, its outcome agreed).
  bool checkpoint_writing = false;
  double checkpoint_wait_seconds = 0;  // training stopped for a checkpoint at the step boundary before this step
};

// One action this rank ran in a step, with its wall-clock span (seconds since the step began).
struct TimedAction {
  schedule::Action action;
  double start = 0, end = 0;
  std::int64_t bytes = 0;  // moved by a send or receive
};

// What an executor records of the runs it makes on this rank, in a record its owner gives it at construction
// (the trainer hands it out with each step): the last run's actions with their spans (the timeline kpipe-train
// times its steps by and writes), and the figures the pipeline report sets beside the simulator's.
struct RunRecord {
  std::vector<TimedAction> timeline;  // every action of the last run, in the order run
  double timeline_origin = 0;         // seconds_now() when that run began
  int peak_stash = 0;                 // micro-batches in flight at once, at most
  int message_buffers = 0;            // spare [N, C] buffers allocated
  int runs = 0;
  // Per chunk, F, B, I, W: seconds summed and actions counted over the runs after the first (which allocates:
  // not representative).
  std::vector<std::array<double, 4>> action_seconds;
  std::vector<std::array<long, 4>> action_count;

  // Mean seconds of one F, B, I, W on chunk `chunk` (index by Op); 0 for kinds that did not run.
  std::array<double, 4> mean_action_seconds(int chunk) const {
    std::array<double, 4> mean{};
    for (int k = 0; k < 4; ++k) {
      const long count = action_count.at(std::size_t(chunk))[k];
      mean[k] = count > 0 ? action_seconds.at(std::size_t(chunk))[k] / double(count) : 0.0;
    }
    return mean;
  }
};

// Asynchronous schedules, per micro-batch run on a rank: the weight version its forward and its backward read.
struct VersionsRead {
  std::int64_t microbatch;
  int forward, backward;
};

// Called after each compute action (F, B, I, W) with its slot, so that an observer (activation traces, text
// generation) can read the chunk's layer outputs and gradients while they exist.
using ActionObserver = std::function<void(const schedule::Action& action, int slot)>;

}  // namespace kpipe::runtime
