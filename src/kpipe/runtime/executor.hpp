#pragma once
// The one executor: runs a lowered list of actions on this rank's stage model, whatever the list is for (a
// training step of any schedule, an evaluation, a token of generated text). It posts receives ahead as the
// buffer plan says, runs the forwards and backwards on the chunks, hands activations and gradients to the
// transport in groups (consecutive messages are one group: NCCL needs it, MPI ignores it), waits for sends only
// at their delivery points, and times every compute action on the stream without fencing. Where weights are
// concerned (which version an action reads, update and running-sum actions) it asks the update policy
// (update_policy.hpp); forward-only lists have none. It never reorders: what runs is the validated list.
// Everything it works with is given at construction (ExecutorLinks); it looks nothing up later.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/transport.hpp"
#include "kpipe/runtime/action_clock.hpp"
#include "kpipe/runtime/buffers.hpp"
#include "kpipe/runtime/program.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_stats.hpp"
#include "kpipe/runtime/token_staging.hpp"
#include "kpipe/runtime/update_policy.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

// What an executor runs with besides the stage model's chunks (all of them outlive it).
struct ExecutorLinks {
  comm::Transport& transport;     // the pipeline's messages
  const comm::ProcessGrid& grid;  // this rank's place (a peer that stops answering is named by it)
  double timeout_s;               // the bound of every wait (pipeline.recv_timeout_s)
  RunRecord& record;              // where its runs' timelines and figures go
  // Micro-batches are told apart modulo this (more than are ever in flight): one executor's buffers serve every
  // program it runs.
  int microbatch_period;
};

template <class T, class A = T> class Executor {
 public:
  Executor(StageModel<T, A>& stage, const ExecutorLinks& links);
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

 private:
  struct Run;
  void post_receive(Run& run, std::size_t position);
  void execute(Run& run, std::size_t position);
  void message(Run& run, const schedule::Action& a, std::size_t position);
  void compute(Run& run, const schedule::Action& a, std::size_t position);
  void update(Run& run, const schedule::Action& a);
  void read_action_times(Run& run);
  void wait_for_sends(const Run& run, std::size_t done, std::size_t position);
  [[noreturn]] void lost(const Run& run, const schedule::Action& a, std::size_t position) const;

  StageModel<T, A>* stage_;
  comm::Transport* transport_;
  comm::ProcessGrid grid_;
  double timeout_s_;
  RunRecord* record_;
  Buffers<T, A> buffers_;
  ActionClock clock_;
  ActionObserver observer_;
  int stash_ = 0;
  ExecSpace space_;
};

}  // namespace kpipe::runtime
