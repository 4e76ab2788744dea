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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kpipe/runtime/action_clock.hpp"
#include "kpipe/runtime/buffers.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_stats.hpp"
#include "kpipe/runtime/token_staging.hpp"
#include "kpipe/runtime/update_policy.hpp"
#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

// A list ready to run on this rank: its actions, the schedule they come from (the layout, the message tags),
// where its buffers come and go, and an offset of its message tags, so that lists that may be under way at once
// (the last sends of an asynchronous step and an evaluation) never share a tag.
struct Program {
  schedule::Schedule lists;
  std::vector<schedule::Action> actions;
  schedule::BufferPlan buffers;
  int tag_base = 0;
  std::string activity = "step";  // names the program in a timeout's message
};
// Rank `rank`'s part of `lists`.
Program program_of(const schedule::Schedule& lists, int rank, int tag_base, std::string activity);
// How a list's micro-batches are told apart: a step's own (a synchronous list), or modulo the tag period of an
// asynchronous one (its micro-batches are numbered over many steps).
int microbatch_period(const schedule::Schedule& lists);

// Which instance of a list a run is: asynchronous lists run shifted by whole steps, and the lists of a resumed
// run number their micro-batches and versions from the resume.
struct Offset {
  int steps = 0;
  std::int64_t microbatch = 0;
  int version = 0;
};

// Position `position` of `program` as instance `offset` runs it.
schedule::Action instance_of(const Program& program, std::size_t position, const Offset& offset);

// Where a run's forwards read their tokens and leave their losses.
struct ListData {
  TokenStaging* tokens = nullptr;
  std::function<int(std::int64_t microbatch)> row;  // the staging row of a micro-batch's windows
  std::function<int(std::int64_t microbatch)> loss_slot;
  Kokkos::View<double*, MemSpace> losses;           // per loss slot, left on the device until the run's end
};

template <class T, class A = T> class Executor {
 public:
  // Runs programs whose micro-batches are told apart modulo `microbatch_period` (more than are ever in flight):
  // one executor's buffers serve every program it runs.
  Executor(StageModel<T, A>& stage, int microbatch_period);
  ~Executor();

  // Runs positions [begin, end) of `program` as instance `offset`. `updates`: the weights' policy (nullptr
  // for forward-only lists). `step` names the run in messages. Returns the compute time on this rank (F, B, I,
  // W and updates). The sends of a run whose list keeps micro-batches in flight (asynchronous steps) are
  // waited on when the next run begins; every other list ends with all of them delivered.
  double run(const Program& program, std::size_t begin, std::size_t end, const Offset& offset,
             UpdatePolicy<T>* updates, const ListData& data, std::int64_t step);
  // Waits for every send of earlier runs still under way: an asynchronous step's last activations, which the
  // next stage receives in its next step, are waited on when the next step begins (not at the step's end:
  // between steps every rank may enter collectives that the receiving rank must reach before it posts the
  // receive), and at the run's last step. `program` and `step` name a timeout.
  void finish_sends(const Program& program, std::int64_t step);  // waits for every send still under way (an asynchronous run's last step)

  void set_observer(ActionObserver observer) { observer_ = std::move(observer); }
  // Every action of the last run on this rank, in the order run.
  const std::vector<TimedAction>& timeline() const { return timeline_; }
  int peak_stash() const { return peak_stash_; }  // micro-batches in flight at once on this rank, at most
  // Mean seconds of one F, B, I, W on chunk `chunk` (index by Op), over the runs after the first; 0 for kinds
  // that did not run.
  std::array<double, 4> mean_action_seconds(int chunk) const;
  int message_buffers() const { return buffers_.message_buffers(); }

 private:
  struct Run;
  void post_receive(Run& run, std::size_t position);
  void execute(Run& run, std::size_t position);
  void compute(Run& run, const schedule::Action& a);
  void read_action_times(Run& run);
  [[noreturn]] void lost(const Run& run, const schedule::Action& a, std::size_t position) const;

  StageModel<T, A>* stage_;
  Buffers<T, A> buffers_;
  ActionClock clock_;
  ActionObserver observer_;
  std::vector<TimedAction> timeline_;
  std::vector<std::array<double, 4>> action_seconds_;  // [chunk] F, B, I, W, summed over the runs after the first
  std::vector<std::array<long, 4>> action_count_;
  int runs_ = 0, stash_ = 0, peak_stash_ = 0;
  ExecSpace space_;
};

}  // namespace kpipe::runtime
