#pragma once
// Training with pipeline parallelism, top to bottom: the plan (every replica's lists after every pass, the
// partition; runtime/run_plan.hpp) is made and every rank's memory held against memory.limit_per_rank before
// anything is allocated; the stage model (this rank's chunks and weight versions; stage_model.hpp) is built;
// then each step runs, top to bottom: the update policy (update_policy.hpp: one optimizer step after the lists,
// or the weight versions of an asynchronous schedule) names the step's part of this rank's list, the executor
// (executor.hpp) runs it, drawing each micro-batch's tokens as it reaches its forward, the step's report
// (step_report.hpp) is summed over the world, and the policy closes the step. With one rank the list is F0 B0
// F1 B1 ...: the plain gradient-accumulation loop that every layout must match bit for bit (docs/architecture.md,
// property 1).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/transport.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/memory/limit.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/runtime/executor.hpp"
#include "kpipe/runtime/pipeline_report.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_stats.hpp"
#include "kpipe/runtime/update_policy.hpp"

namespace kpipe::runtime {

template <class T, class A> class Evaluator;

struct TrainerOptions {
  // How the stages exchange data; none: pipeline.transport resolved without looking at the node
  // (placement.hpp's default_transport). Tests run NCCL's path on host builds with mpi_stream_ordered.
  std::optional<comm::TransportKind> transport;
  // The stop signal this rank has received (signals.hpp: received_stop_signal), read as each step's lists end
  // and passed on with the step's report; none: no signal is ever passed on.
  std::function<int()> stop_signal;
  // Whether this rank's checkpoint write beside the training (io/checkpoint_saver.hpp) is still under way, read
  // and passed on alike; none: never.
  std::function<bool()> checkpoint_writing;
  // The pipeline's transport becomes wrap_transport(transport), a decorator around it, before anything uses it
  // (tests delay or stall a rank's messages: tests/support/stalling_transport.hpp); none: as made.
  std::function<std::unique_ptr<comm::Transport>(std::unique_ptr<comm::Transport>)> wrap_transport;
  // The step boundary the run starts at: a checkpoint's, chosen before the trainer is built (io/checkpoint.hpp's
  // choose_resume_point), since an asynchronous run's lists continue the run from there. The trainer plans
  // once, for that step; resume() then restores the checkpoint's state at it.
  std::int64_t first_step = 0;
};

template <class T, class A = T> class Trainer {
 public:
  // Bad input throws InputError identically on every rank, before any allocation.
  Trainer(const Config& config, const data::Corpus& corpus, const comm::ProcessGrid& grid,
          const TrainerOptions& options = {});
  ~Trainer();

  // Runs the next step: one optimizer step on the next mini-batch, or (asynchronous schedules) the next m
  // micro-batches' share of the lists (their forwards, the backwards and updates due in the step), without a
  // flush.
  // The report (the step's loss, the update norms, the stop votes) is one sum over the world. A synchronous
  // step needs it for its optimizer step, so it completes here. An asynchronous step's updates are done within
  // its lists, so its report completes in the next run_step(), after that step's lists: no rank waits at the
  // step boundary while the first stage runs the step's last backward (docs/schedules.md).
  void run_step();
  // The reports completed since the last call, oldest first: each step's once.
  std::vector<StepStats> take_reports();
  // Collective: completes the report under way, if any. Before what wants every report of the steps run (a
  // checkpoint's step, the run's end, the timeline); a caller that never settles gets each report a step late.
  void settle();
  // run_step(), settle() and the step's report: one step at a time (tests, benchmarks).
  StepStats step();
  double evaluate();  // mean per-token loss over the validation windows (every rank gets it)
  std::int64_t next_step() const { return step_; }
  // Resuming at step boundary `step` from a checkpoint already loaded into stage() (the newest weights and the
  // optimizer state); an asynchronous run also gets the older weight versions its micro-batches in flight read,
  // older[c][j - 1] = version j updates back on chunk c (empty: a drained run's checkpoint), and continues with
  // the validated lists, planned at construction, that forward those micro-batches again on their versions.
  // Plans nothing: an asynchronous run resumed at another step than TrainerOptions::first_step is a
  // std::logic_error (synchronous lists are every step's: any step).
  void resume(std::int64_t step, const std::vector<std::vector<std::vector<T>>>& older = {});
  std::uint64_t param_checksum() { return stage_->param_checksum(); }  // every rank gets the whole model's

  const Config& config() const { return config_; }
  const data::Corpus& corpus() const { return *corpus_; }  // its tokenizer is what the model's ids mean
  const model::ModelDesc& desc() const { return desc_; }
  const RunPlan& plan() const { return plan_; }
  // The memory limit the run was held to and the largest need (memory/limit.hpp), for the start-up line.
  const std::string& memory_verdict() const { return memory_verdict_; }
  StageModel<T, A>& stage() { return *stage_; }
  const StageModel<T, A>& stage() const { return *stage_; }
  // What the executor recorded: the last step's actions with their times, and the figures kept across steps.
  const RunRecord& record() const { return record_; }
  void set_observer(ActionObserver observer) { executor_->set_observer(std::move(observer)); }
  // Collective over the pipeline: the measured bubble beside the simulated one, with the per-action costs and the
  // message cost measured on this run's transport (pipeline_report.hpp); `time` as pipeline_report says.
  PipelineReport pipeline_report(const schedule::RankTime& time);
  // Whether step `step` is one of the run's steady state (asynchronous schedules: past the warm-up, before the
  // last step's drain, when the run has such steps; synchronous ones: every step), for the figures compared
  // with the simulator's steady state.
  bool steady_step(std::int64_t step) const { return updates_->steady_step(step); }
  // Asynchronous schedules: per micro-batch run here, the versions its forward and backward read (empty for
  // synchronous ones).
  const std::vector<VersionsRead>& versions_read() const { return updates_->versions_read(); }

 private:
  // The step's report, from the world's sum once it is in.
  void close_report(StepStats stats, const StepReport& report);

  // A step's report whose sum over the world is under way.
  struct ReportUnderWay {
    StepStats stats;
    comm::PendingAllreduce<double> sum;  // of StepReport::pack()
  };

  Config config_;
  const data::Corpus* corpus_;
  comm::ProcessGrid grid_;
  const memory::Limit limit_;  // memory.limit_per_rank, resolved once, before the model is described
  model::ModelDesc desc_;
  TrainerOptions options_;
  const RunPlan plan_;  // once per run, at construction
  std::string memory_verdict_;
  std::unique_ptr<StageModel<T, A>> stage_;
  std::unique_ptr<comm::Transport> transport_;  // the pipeline's, what pipeline.transport resolved to
  std::unique_ptr<UpdatePolicy<T>> updates_;
  Program program_;  // this rank's list
  RunRecord record_;
  std::unique_ptr<Executor<T, A>> executor_;
  std::unique_ptr<TokenStaging> tokens_;
  Kokkos::View<double*, MemSpace> losses_;  // per loss slot (train.microbatches), on the device until a step's end
  std::unique_ptr<Evaluator<T, A>> evaluator_;
  std::int64_t step_ = 0;
  int boundary_;  // the step of the lists' steps that ran last (before any: the last, which leaves nothing held)
  std::optional<ReportUnderWay> report_under_way_;  // the last step's, until the policy or the next step settles it
  std::vector<StepStats> reports_;                  // completed, not taken yet
  ExecSpace space_;
};

}  // namespace kpipe::runtime
