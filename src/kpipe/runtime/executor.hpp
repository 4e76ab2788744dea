#pragma once
// The one executor: runs a lowered list of actions on this rank's stage model, whatever the list is for (a
// training step of any schedule, an evaluation, a token of generated text). It posts receives ahead as the
// buffer plan says, runs the forwards and backwards on the chunks, hands activations and gradients to the
// transport in groups (consecutive messages are one group: NCCL needs it, MPI ignores it), waits for sends only
// at their delivery points, and times every compute action on the stream without fencing. Where weights are
// concerned (which version an action reads, update and running-sum actions) it asks the update policy
// (update_policy.hpp); forward-only lists have none. It never reorders: what runs is the validated list.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kpipe/runtime/action_clock.hpp"
#include "kpipe/runtime/buffers.hpp"
#include "kpipe/runtime/program.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_stats.hpp"
#include "kpipe/runtime/token_staging.hpp"
#include "kpipe/runtime/update_policy.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class Executor {
 public:
  // Runs programs whose micro-batches are told apart modulo `microbatch_period` (more than are ever in flight):
  // one executor's buffers serve every program it runs.
  Executor(StageModel<T, A>& stage, int microbatch_period);
  ~Executor();

  // Runs `range` of `program`. `updates`: the weights' policy (nullptr for forward-only lists); `tokens`: where
  // its forwards read tokens and leave losses. `step` names the run in messages. Returns the compute time on
  // this rank (F, B, I, W and updates). A run that reaches the list's end returns with every send delivered;
  // one that ends at a step boundary S leaves the sends the list delivers there under way (finish_sends).
  double run(const Program& program, const ListRange& range, UpdatePolicy<T>* updates, TokenSource& tokens,
             std::int64_t step);
  // Waits for every send of earlier runs still under way: a step's last activations, which the next stage
  // receives in its next step, are waited on when the next step begins, not at the step's end (between steps
  // every rank may enter collectives that the receiving rank must reach before it posts the receive).
  // `program` and `step` name a timeout.
  void finish_sends(const Program& program, std::int64_t step);

  void set_observer(ActionObserver observer) { observer_ = std::move(observer); }
  // Every action of the last run on this rank, in the order run.
  const std::vector<TimedAction>& timeline() const { return timeline_; }
  double timeline_origin() const { return origin_; }  // seconds_now() when the run timeline() holds began
  int peak_stash() const { return peak_stash_; }  // micro-batches in flight at once on this rank, at most
  // Mean seconds of one F, B, I, W on chunk `chunk` (index by Op), over the runs after the first; 0 for kinds
  // that did not run.
  std::array<double, 4> mean_action_seconds(int chunk) const;
  int message_buffers() const { return buffers_.message_buffers(); }

 private:
  struct Run;
  void post_receive(Run& run, std::size_t position);
  void execute(Run& run, std::size_t position);
  void compute(Run& run, const schedule::Action& a, std::size_t position);
  void read_action_times(Run& run);
  void wait_for_sends(const Run& run, std::size_t done, std::size_t position);
  [[noreturn]] void lost(const Run& run, const schedule::Action& a, std::size_t position) const;

  StageModel<T, A>* stage_;
  Buffers<T, A> buffers_;
  ActionClock clock_;
  ActionObserver observer_;
  std::vector<TimedAction> timeline_;
  double origin_ = 0;
  std::vector<std::array<double, 4>> action_seconds_;  // [chunk] F, B, I, W, summed over the runs after the first
  std::vector<std::array<long, 4>> action_count_;
  int runs_ = 0, stash_ = 0, peak_stash_ = 0;
  ExecSpace space_;
};

}  // namespace kpipe::runtime
