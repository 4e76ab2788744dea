#include "kpipe/runtime/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/clock.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/memory/limit.hpp"
#include "kpipe/runtime/evaluator.hpp"
#include "kpipe/runtime/flush_updates.hpp"
#include "kpipe/runtime/placement.hpp"
#include "kpipe/runtime/signals.hpp"
#include "kpipe/runtime/versioned_updates.hpp"
#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::runtime {

using schedule::Action;
using schedule::Op;

template <class T, class A>
Trainer<T, A>::Trainer(const Config& config, const data::Corpus& corpus, const comm::ProcessGrid& grid,
                    const TrainerOptions& options)
    : config_(config), corpus_(&corpus), grid_(grid), desc_(model::describe(config.model)), options_(options) {
  // Every id indexes the embedding and the head: the data's vocabulary must fit the model's.
  require(corpus.vocab() <= config.model.vocab,
          "model.vocab = {}: the data ({}) has a vocabulary of {} ({} tokens)", config.model.vocab, corpus.source,
          corpus.vocab(), data::to_string(corpus.tokenizer.kind()));
  plan_ = plan_run(config, desc_, grid, options.transport.value_or(default_transport(config.pipeline)));
  // Before any allocation: every rank's predicted memory against the limit (the same verdict on every rank).
  memory::enforce_limit(config, desc_, plan_.run(), grid.world);

  stage_ = std::make_unique<StageModel<T, A>>(config, desc_, grid, plan_);
  if (plan_.asynchronous()) {
    auto versioned = std::make_unique<VersionedUpdates<T, A>>(*stage_, plan_);
    versioned_ = versioned.get();
    updates_ = std::move(versioned);
  } else {
    updates_ = std::make_unique<FlushUpdates<T, A>>(*stage_, plan_);
  }
  program_ = Program{plan_.lists(), plan_.actions, plan_.buffers, 0, "step"};
  executor_ = std::make_unique<Executor<T, A>>(*stage_, microbatch_period(plan_.lists()));
  // Token rows for each micro-batch a step forwards (asynchronous schedules: up to m + p - 1 consecutive ones,
  // the first step's warm-up too), and a loss slot per micro-batch of the whole mini-batch.
  const int rows = plan_.local_microbatches + (plan_.asynchronous() ? config.pipeline.pipeline_size - 1 : 0);
  tokens_ = std::make_unique<TokenStaging>(rows, std::int64_t(plan_.sequences_per_microbatch) * config.model.seq_len);
  {
    memory::Scope scope(memory::Category::workspaces);  // memory/plan.cpp counts them
    losses_ = Kokkos::View<double*, MemSpace>("kpipe::runtime::Trainer::losses", config.train.microbatches);
  }
  // Evaluation's lists are tagged above the training lists' (an asynchronous step's last sends may still be
  // under way when it runs).
  evaluator_ = std::make_unique<Evaluator<T, A>>(*stage_, plan_, corpus, *tokens_, losses_,
                                              schedule::message_tags(plan_.lists()));
}

template <class T, class A> Trainer<T, A>::~Trainer() = default;

// The windows of the micro-batches the step forwards on a chunk that reads tokens, into their rows (micro-batch
// mod rows: a step forwards consecutive micro-batches, at most as many as there are rows).
template <class T, class A> void Trainer<T, A>::stage_tokens(std::size_t begin, std::size_t end, const Offset& offset) {
  const int seq = config_.model.seq_len, sequences = plan_.sequences_per_microbatch;
  for (std::size_t i = begin; i < end; ++i) {
    const Action a = instance_of(program_, i, offset);
    if (a.op != Op::forward) continue;
    const auto& chunk = stage_->chunk(a.chunk);
    if (!chunk.first() && !chunk.last()) continue;
    const int row = int(a.microbatch % tokens_->rows());
    const Windows w = updates_->windows(step_, a.microbatch);
    data::fill_train_windows(corpus_->train, config_.train.seed, w.sampler_step, w.first_sequence, sequences, seq,
                             tokens_->inputs(row), tokens_->targets(row));
  }
}

template <class T, class A> void Trainer<T, A>::run_step() {
  const bool asynchronous = plan_.asynchronous();
  require(!asynchronous || step_ < config_.train.steps,
          "train.steps = {}: an asynchronous run cannot go past its last step (it drains the pipeline there)",
          config_.train.steps);
  // This step's share of the list: all of it, or (asynchronous) the step of the validated lists that
  // step_source() names, shifted to this step (schedule/asynchronous.hpp).
  std::size_t begin = 0, end = program_.actions.size();
  Offset offset = resumed_;
  if (asynchronous) {
    const auto source = schedule::step_source(int(plan_.steps.size()), plan_.template_step,
                                              int(config_.train.steps - first_step_), int(step_ - first_step_));
    std::tie(begin, end) = plan_.steps.at(source.step);
    offset.steps = source.shift;
  }
  executor_->finish_sends(program_, step_);  // the previous step's last sends (asynchronous lists)
  const double start = seconds_now();
  stage_tokens(begin, end, offset);
  updates_->begin_step(step_);
  const int rows = tokens_->rows();
  const ListData data{tokens_.get(), [rows](std::int64_t mb) { return int(mb % rows); },
                      [this](std::int64_t mb) { return updates_->loss_slot(mb); }, losses_};
  StepStats stats;
  stats.step = step_;
  stats.tokens = std::int64_t(config_.train.batch) * config_.model.seq_len;
  stats.busy_seconds = executor_->run(program_, begin, end, offset, updates_.get(), data, step_);
  // The report: each micro-batch's loss sum by slot (it lives on one rank, zeros elsewhere: the world's sum is
  // exact), the stop votes, and what the update policy adds.
  std::vector<double> sums(losses_.extent(0));
  Kokkos::deep_copy(Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(sums.data(), sums.size()),
                    losses_);
  stats.pipeline_seconds = seconds_now() - start;
  const auto votes = stop_votes(options_.stop_signal ? options_.stop_signal() : 0);
  sums.insert(sums.end(), votes.begin(), votes.end());
  updates_->contribute(sums, stats);
  // One report under way at a time: the previous step's completes first (every rank started it before this
  // step's lists, so it waits for no one still running them).
  settle();
  report_under_way_.emplace(ReportUnderWay{
      stats, comm::PendingAllreduce<double>(std::move(sums), MPI_SUM, grid_.world,
                                            {config_.pipeline.recv_timeout_s,
                                             fmt::format("the loss allreduce of step {}", step_)})});
  if (!asynchronous) settle();  // the optimizer step needs the loss
  // An asynchronous run's last step drains the pipeline: every send is received within it.
  if (asynchronous && step_ + 1 == config_.train.steps) executor_->finish_sends(program_, step_);
  // The step's wall time on this rank (a synchronous step's optimizer step included).
  StepStats& report = report_under_way_ ? report_under_way_->stats : reports_.back();
  report.seconds = seconds_now() - start;
  ++step_;
}

template <class T, class A> void Trainer<T, A>::settle() {
  if (!report_under_way_) return;
  ReportUnderWay report = std::move(*report_under_way_);
  report_under_way_.reset();
  close_report(report.stats, report.sums.wait());
}

template <class T, class A> void Trainer<T, A>::close_report(StepStats stats, const std::vector<double>& sums) {
  // The losses added in slot order: the same sum on every layout.
  const int m = config_.train.microbatches;
  double loss = 0;
  for (int j = 0; j < m; ++j) loss += sums[j];
  stats.loss = loss / double(stats.tokens);
  stats.stop_signal = agreed_stop_signal({sums[m], sums[m + 1]});
  updates_->finish(stats.step, sums, stats);
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
  return evaluator_->evaluate(step_);
}

template <class T, class A>
void Trainer<T, A>::resume(std::int64_t step, const std::vector<std::vector<std::vector<T>>>& older) {
  step_ = first_step_ = step;
  if (!versioned_) return;
  const auto& lists = plan_.lists();
  resumed_ = {0, step * lists.microbatches, int(step) * schedule::versions_per_step(lists.updates, lists.microbatches)};
  if (step < config_.train.steps) {
    // The lists of the rest of the run, beginning with the micro-batches in flight at the step boundary:
    // validated as every schedule is (their first reads are of the versions held at the start).
    plan_ = plan_run(config_, desc_, grid_, plan_.transport, step);
    program_ = Program{plan_.lists(), plan_.actions, plan_.buffers, 0, "step"};
  }
  const std::vector<std::vector<std::vector<T>>> drained(std::size_t(stage_->chunks()));
  versioned_->resume(plan_, resumed_.microbatch, resumed_.version, older.empty() ? drained : older);
}

template <class T, class A> bool Trainer<T, A>::steady_step(std::int64_t step) const {
  if (!plan_.asynchronous() || config_.train.steps < plan_.template_step + 2) return true;
  return step >= plan_.template_step && step + 1 < config_.train.steps;
}

template <class T, class A> const std::vector<VersionsRead>& Trainer<T, A>::versions_read() const {
  return versioned_ ? versioned_->versions_read() : no_versions_read_;
}

template class Trainer<float>;
template class Trainer<double>;
template class Trainer<float, bf16>;

}  // namespace kpipe::runtime
