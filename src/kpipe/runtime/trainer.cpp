#include "kpipe/runtime/trainer.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/clock.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/core/step_number.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/memory/limit.hpp"
#include "kpipe/runtime/evaluator.hpp"
#include "kpipe/runtime/placement.hpp"
#include "kpipe/runtime/signals.hpp"
#include "kpipe/schedule/run_steps.hpp"

namespace kpipe::runtime {

namespace {

// A training step's tokens: each micro-batch's windows, as the update policy names them, drawn into row
// (micro-batch mod rows) when the executor reaches its first forward here (a step forwards consecutive
// micro-batches, at most as many as there are rows); its loss into the policy's slot.
template <class T> class StepTokens final : public TokenSource {
 public:
  StepTokens(TokenStaging& staging, Kokkos::View<double*, MemSpace> losses, const UpdatePolicy<T>& updates,
             const data::Corpus& corpus, const Config& config, int sequences, std::int64_t step)
      : TokenSource(staging, std::move(losses)), updates_(&updates), corpus_(&corpus), config_(&config),
        sequences_(sequences), step_(step), drawn_(std::size_t(staging.rows()), -1) {}

  int stage(std::int64_t microbatch) override {
    const int row = int(microbatch % staging_->rows());
    if (drawn_[std::size_t(row)] == microbatch) return row;  // a rank with the first and the last virtual stage
    drawn_[std::size_t(row)] = microbatch;
    const Windows w = updates_->windows(step_, microbatch);
    data::fill_train_windows(corpus_->train, config_->train.seed, w.sampler_step, w.first_sequence, sequences_,
                             config_->model.seq_len, staging_->inputs(row), staging_->targets(row));
    return row;
  }
  int loss_slot(std::int64_t microbatch) const override { return updates_->loss_slot(microbatch); }

 private:
  const UpdatePolicy<T>* updates_;
  const data::Corpus* corpus_;
  const Config* config_;
  int sequences_;
  std::int64_t step_;
  std::vector<std::int64_t> drawn_;  // per row: the micro-batch drawn into it this step, -1 for none
};

// The model's description, once the limit can hold its parameters at all.
model::ModelDesc described(const Config& config, const memory::Limit& limit) {
  memory::enforce_parameter_bound(config, limit);
  return model::describe(config.model);
}

// The run's plan, made once, from its first step; first the data's vocabulary checked against the model's
// (every id indexes the embedding and the head).
RunPlan checked_plan(const Config& config, const data::Corpus& corpus, const model::ModelDesc& desc,
                     const comm::ProcessGrid& grid, const TrainerOptions& options) {
  require(corpus.vocab() <= config.model.vocab,
          "model.vocab = {}: the data ({}) has a vocabulary of {} ({} tokens)", config.model.vocab, corpus.source,
          corpus.vocab(), data::to_string(corpus.tokenizer.kind()));
  return plan_run(config, desc, grid, options.transport.value_or(default_transport(config.pipeline)),
                  options.first_step);
}

}  // namespace

template <class T, class A>
Trainer<T, A>::Trainer(const Config& config, const data::Corpus& corpus, const comm::ProcessGrid& grid,
                       const TrainerOptions& options)
    : config_(config), corpus_(&corpus), grid_(grid),
      limit_(memory::resolve_limit(config.memory.limit_per_rank, grid.world, config.pipeline.recv_timeout_s)),
      desc_(described(config, limit_)), options_(options), plan_(checked_plan(config, corpus, desc_, grid, options)),
      boundary_(int(plan_.steps.size()) - 1) {
  // Before any allocation: every rank's predicted memory against the limit (the same verdict on every rank;
  // checkpoint.async = auto may give way here, and the stage model's copy of the configuration says so).
  memory_verdict_ = memory::enforce_limit(config_, limit_, desc_, plan_.schedule, grid.world);

  stage_ = std::make_unique<StageModel<T, A>>(config_, desc_, grid, plan_);
  // Collective over the pipeline where the transport is NCCL (its communicator is built here).
  const double timeout = config.pipeline.recv_timeout_s;
  transport_ = comm::make_transport(plan_.transport, grid.pipeline, timeout);
  if (options.wrap_transport) transport_ = options.wrap_transport(std::move(transport_));
  updates_ = make_update_policy(*stage_, plan_);
  program_ = program_of(plan_.lists(), plan_.stage, plan_.buffers(), 0, "step");
  executor_ = std::make_unique<Executor<T, A>>(
      *stage_, ExecutorLinks{*transport_, grid_, timeout, record_, schedule::tag_period(plan_.lists())});
  // Token rows for each micro-batch a step forwards, and a loss slot per micro-batch of the whole mini-batch.
  tokens_ = std::make_unique<TokenStaging>(schedule::staged_microbatches(plan_.lists()),
                                           std::int64_t(plan_.sequences_per_microbatch) * config.model.seq_len);
  {
    memory::Scope scope(memory::Category::workspaces);  // memory/plan.cpp counts them
    losses_ = Kokkos::View<double*, MemSpace>("kpipe::runtime::Trainer::losses", config.train.microbatches);
  }
  // Evaluation's lists are tagged above the training lists' (a step's last sends may still be under way when
  // it runs).
  evaluator_ = std::make_unique<Evaluator<T, A>>(*stage_, plan_, corpus, *tokens_, losses_, *transport_,
                                                 schedule::message_tags(plan_.lists()));
}

template <class T, class A> Trainer<T, A>::~Trainer() = default;

template <class T, class A> void Trainer<T, A>::run_step() {
  const ListRange range = updates_->step_range(step_);
  boundary_ = range.step;
  executor_->finish_sends(program_, step_);  // what the previous step's list delivers at its step boundary
  const double start = seconds_now();
  updates_->begin_step(step_);
  StepTokens<T> tokens(*tokens_, losses_, *updates_, *corpus_, config_, plan_.sequences_per_microbatch, step_);
  StepStats stats;
  stats.step = step_;
  stats.tokens = std::int64_t(config_.train.batch) * config_.model.seq_len;
  stats.busy_seconds = executor_->run(program_, range, updates_.get(), tokens, step_);
  StepReport report;
  report.losses = tokens.read_losses(space_);
  stats.pipeline_seconds = seconds_now() - start;
  report.stop_votes = stop_votes(options_.stop_signal ? options_.stop_signal() : 0);
  report.checkpoint_writes = options_.checkpoint_writing && options_.checkpoint_writing() ? 1 : 0;
  updates_->contribute(report, stats);
  // One report under way at a time: the previous step's completes first (every rank started it before this
  // step's lists, so it waits for no one still running them).
  settle();
  report_under_way_.emplace(ReportUnderWay{
      stats, comm::PendingAllreduce<double>(report.pack(), MPI_SUM, grid_.world,
                                            {config_.pipeline.recv_timeout_s,
                                             fmt::format("the loss allreduce of step {}", step_number(step_)),
                                             grid_.nodes})});
  if (updates_->report_completes_in_step()) settle();
  // The step's wall time on this rank (with the optimizer step where the report completed in it).
  StepStats& stats_of_step = report_under_way_ ? report_under_way_->stats : reports_.back();
  stats_of_step.seconds = seconds_now() - start;
  ++step_;
}

template <class T, class A> void Trainer<T, A>::settle() {
  if (!report_under_way_) return;
  ReportUnderWay report = std::move(*report_under_way_);
  report_under_way_.reset();
  close_report(report.stats, StepReport::unpack(report.sum.wait()));
}

template <class T, class A> void Trainer<T, A>::close_report(StepStats stats, const StepReport& report) {
  stats.loss = report.loss_sum() / double(stats.tokens);
  stats.stop_signal = agreed_stop_signal(report.stop_votes);
  stats.checkpoint_writing = report.checkpoint_writes > 0;
  updates_->finish(stats.step, report, stats);
  reports_.push_back(stats);
}

template <class T, class A> std::vector<StepStats> Trainer<T, A>::take_reports() { return std::exchange(reports_, {}); }

template <class T, class A> StepStats Trainer<T, A>::step() {
  run_step();
  settle();
  auto reports = take_reports();
  if (reports.size() != 1 || reports.back().step + 1 != step_)
    throw std::logic_error("Trainer::step: reports of earlier steps were not taken");
  return reports.back();
}

template <class T, class A> double Trainer<T, A>::evaluate() {
  settle();  // the report first: every rank enters its collectives in one order
  return evaluator_->evaluate(step_, boundary_);
}

template <class T, class A> PipelineReport Trainer<T, A>::pipeline_report(const schedule::RankTime& time) {
  return runtime::pipeline_report(*stage_, plan_, record_, *transport_, time);
}

template <class T, class A>
void Trainer<T, A>::resume(std::int64_t step, const std::vector<std::vector<std::vector<T>>>& older) {
  // The lists were planned at construction; an asynchronous run's continue only the step they were planned from.
  if (updates_->runs_lists_from(step) && step != plan_.first_step)
    throw std::logic_error(fmt::format("Trainer::resume at step {}: the asynchronous lists were planned from step {} "
                                       "(TrainerOptions::first_step: choose the checkpoint before building the trainer)",
                                       step, plan_.first_step));
  step_ = step;
  updates_->resume(step, older);
}

#define KPIPE_INSTANTIATE(T, A) template class Trainer<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
