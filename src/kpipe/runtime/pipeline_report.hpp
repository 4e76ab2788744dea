#pragma once
// What the pipeline did, measured, beside what the simulator predicts for the same schedule with the
// per-action costs this run measured (docs/architecture.md, property 2: the runtime measures what the simulator
// predicts).
#include <vector>

#include "kpipe/comm/message_probe.hpp"
#include "kpipe/comm/transport.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_stats.hpp"
#include "kpipe/schedule/bubble.hpp"

namespace kpipe::runtime {

struct PipelineReport {
  std::vector<double> measured_bubble;   // per pipeline rank: schedule/bubble.hpp's idle fraction
  std::vector<double> simulated_bubble;  // per pipeline rank, from schedule::simulate
  double measured_mean = 0, simulated_mean = 0;
  double cost_f = 0, cost_b = 0, cost_i = 0, cost_w = 0;  // mean seconds per action on one chunk
  comm::MessageCost messages;            // measured after the run: what the simulator charges a message
  std::vector<int> peak_stash;           // measured, per pipeline rank
  std::vector<int> predicted_stash;      // schedule::peak_stash
  std::vector<int> allocated_slots;      // measured, per pipeline rank: slots in the pools of its chunks
};

// Collective over the stage's pipeline (every rank of it calls it): what the executor recorded running the
// plan's lists on `stage` (`record`), and what a message costs on `transport` (measured here, through the stage's
// buffers). `time`: this rank's busy time and span summed over the steps to count (e.g. all but the first), each
// step's from its timeline (schedule::add_step).
template <class T, class A>
PipelineReport pipeline_report(StageModel<T, A>& stage, const RunPlan& plan, const RunRecord& record,
                               comm::Transport& transport, const schedule::RankTime& time);

}  // namespace kpipe::runtime
