// kpipe-train: trains a GPT on byte-level text. Configuration: --preset, --config FILE, --table.key VALUE
// (see --help). Progress on stderr; --metrics FILE writes JSON Lines.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/clock.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/plural.hpp"
#include "kpipe/core/step_number.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/io/init_from.hpp"
#include "kpipe/io/checkpoint_saver.hpp"
#include "kpipe/io/timeline.hpp"
#include "kpipe/io/trace.hpp"
#include "kpipe/memory/meter.hpp"
#include "kpipe/runtime/async_rules.hpp"
#include "kpipe/runtime/layer_profile.hpp"
#include "kpipe/runtime/memory_report.hpp"
#include "kpipe/runtime/metrics.hpp"
#include "kpipe/runtime/pipeline_report.hpp"
#include "kpipe/runtime/placement.hpp"
#include "kpipe/runtime/corruption_checks.hpp"
#include "kpipe/runtime/signals.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "kpipe/schedule/bubble.hpp"

#include "mpi_program.hpp"
#include "storage_type.hpp"

namespace {

std::string duration(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60) : fmt::format("{}m{:02d}s", s / 60, s % 60);
}

// What the run learns from its steps' reports as they arrive (an asynchronous step's a step late,
// runtime/trainer.hpp): each step's metrics and log line, the figures of the steady steps, the non-finite
// steps in a row, and the stop signal the world agreed on. Every rank gets the same reports, so every rank
// decides alike. And, from each step's actions as the executor timed them, the pipeline's time.
class StepLog {
 public:
  StepLog(const kpipe::Config& config, int rank, std::int64_t first_step, kpipe::runtime::MetricsWriter& metrics)
      : config_(&config), rank_(rank), first_step_(first_step), metrics_(&metrics) {}

  // Records one step's report; `steady`: the step is of the steady state (asynchronous schedules: no warm-up,
  // no drain). Returns an exit code when the run must stop (train.max_skipped_steps non-finite steps in a
  // row), 0 to go on.
  int record(kpipe::runtime::StepStats stats, bool steady) {
    using namespace kpipe;
    const auto& train = config_->train;
    const std::int64_t s = stats.step;
    if (const auto waited = checkpoint_waits_.find(s); waited != checkpoint_waits_.end()) {
      stats.checkpoint_wait_seconds = waited->second;
      checkpoint_waits_.erase(waited);
    }
    // A non-finite loss or gradient: the trainer skipped the update on every rank alike; say so, and stop
    // after train.max_skipped_steps in a row.
    skipped_in_a_row_ = stats.skipped ? skipped_in_a_row_ + 1 : 0;
    skipped_ += stats.skipped ? 1 : 0;
    if (stats.skipped && rank_ == 0)
      fmt::print(stderr, "kpipe-train: step {} skipped: loss {} grad norm {} not finite ({} in a row)\n",
                 step_number(s), stats.loss, stats.grad_norm, skipped_in_a_row_);
    count(stats, steady);
    metrics_->write_step(stats);
    if (stats.stop_signal && !stop_signal_) stop_signal_ = stats.stop_signal;
    if (train.max_skipped_steps > 0 && skipped_in_a_row_ >= train.max_skipped_steps) {
      if (rank_ == 0)
        fmt::print(stderr, "kpipe-train: stopping: {} in a row with a non-finite loss or gradient "
                           "(train.max_skipped_steps = {}); exit code {}\n",
                   quantity(skipped_in_a_row_, "step"), train.max_skipped_steps, exit_status(ExitCode::non_finite));
      return exit_status(ExitCode::non_finite);
    }
    // The run's first step, then every train.log_every steps, and the last.
    const std::int64_t n = step_number(s);
    if (rank_ == 0 && (s == first_step_ || n % train.log_every == 0 || n == train.steps)) print_progress(stats);
    return 0;
  }

  // Step `s`'s actions on this rank as the executor timed them: the measured bubble's figures (schedule/bubble.hpp),
  // from the very timings the timeline file records, so that kpipe-inspect finds the same bubble in it.
  void time_step(std::int64_t s, const std::vector<kpipe::runtime::TimedAction>& actions, bool steady) {
    if (counted(s, steady)) kpipe::schedule::add_step(pipeline_time_, actions);
  }

  // The training stopped `seconds` for a checkpoint at step boundary `step`, before step `step` ran: that step's
  // metrics say so (checkpoint_wait_seconds).
  void checkpoint_wait(std::int64_t step, double seconds) { checkpoint_waits_[step] += seconds; }

  int stop_signal() const { return stop_signal_; }  // 0: none
  std::int64_t skipped_steps() const { return skipped_; }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  std::int64_t tokens() const { return tokens_; }
  // Over the steady steps after the first (which allocates), as the simulator's figures.
  const kpipe::schedule::RankTime& pipeline_time() const { return pipeline_time_; }
  double optimizer_seconds() const { return optimizer_seconds_; }
  int counted_steps() const { return counted_steps_; }
  std::int64_t first_step() const { return first_step_; }
  // The median over the steps after the first (which allocates and warms up) of each step's tokens / seconds:
  // the like-for-like figure beside a framework's median steady step. The only step's when there is one.
  double steady_tokens_per_s() const {
    std::vector<double> rates = steady_rates_;
    if (rates.empty()) return first_rate_;
    const auto middle = rates.begin() + std::ptrdiff_t(rates.size() / 2);
    std::nth_element(rates.begin(), middle, rates.end());
    if (rates.size() % 2 == 1) return *middle;
    return 0.5 * (*middle + *std::max_element(rates.begin(), middle));
  }

 private:
  // The throughput and the steady steps' sums.
  void count(const kpipe::runtime::StepStats& stats, bool steady) {
    tokens_ += stats.tokens;
    const double rate = stats.seconds > 0 ? double(stats.tokens) / stats.seconds : 0;
    if (stats.step > first_step_) {
      steady_rates_.push_back(rate);
    } else {
      first_rate_ = rate;
    }
    if (counted(stats.step, steady)) {
      optimizer_seconds_ += stats.optimizer_seconds;
      ++counted_steps_;
    }
  }

  // The steps the figures count: the steady ones after the first (the only one when there is one).
  bool counted(std::int64_t s, bool steady) const {
    return (s > first_step_ || config_->train.steps == first_step_ + 1) && steady;
  }

  void print_progress(const kpipe::runtime::StepStats& stats) const {
    const auto& train = config_->train;
    const std::int64_t n = kpipe::step_number(stats.step);
    const double elapsed = seconds();
    fmt::print(stderr, "step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}\n", n,
               train.steps, stats.loss, stats.lr, stats.grad_norm, double(tokens_) / elapsed,
               duration(elapsed / double(n - first_step_) * double(train.steps - n)));
  }

  const kpipe::Config* config_;
  int rank_;
  std::int64_t first_step_;  // > 0 when resumed
  kpipe::runtime::MetricsWriter* metrics_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::int64_t tokens_ = 0;
  kpipe::schedule::RankTime pipeline_time_;
  double optimizer_seconds_ = 0;
  int counted_steps_ = 0;
  std::vector<double> steady_rates_;  // tokens / seconds of each step after the first
  double first_rate_ = 0;
  int skipped_in_a_row_ = 0;
  std::int64_t skipped_ = 0;
  int stop_signal_ = 0;
  std::map<std::int64_t, double> checkpoint_waits_;  // by the step they came before, until its report
};

// What a run holds, on every rank. A: what activations and messages are stored in (float, or bf16 under
// train.precision = bf16).
template <class A> struct TrainingRun {
  TrainingRun(const kpipe::Config& run_config, int world_rank)
      : config(run_config),
        rank(world_rank),
        grid(kpipe::comm::make_grid(MPI_COMM_WORLD, config.pipeline.pipeline_size, config.pipeline.data_parallel,
                                    config.pipeline.recv_timeout_s)) {}

  kpipe::Config config;  // the data's vocabulary sizes the model: set when the data is opened
  int rank;
  kpipe::comm::ProcessGrid grid;
  kpipe::memory::Meter meter;  // every Kokkos allocation from here on, by category, beside the plan's prediction
  kpipe::data::Corpus corpus;
  std::unique_ptr<kpipe::runtime::MetricsWriter> metrics;
  std::unique_ptr<kpipe::runtime::Trainer<float, A>> trainer;
  std::unique_ptr<kpipe::io::ActivationTracer<float, A>> tracer;
  std::unique_ptr<kpipe::io::TimelineRecorder> timeline;
  std::unique_ptr<kpipe::io::CheckpointDir> checkpoints;
  std::unique_ptr<kpipe::io::CheckpointSaver<float, A>> saver;  // with checkpoints
  std::unique_ptr<kpipe::runtime::CorruptionChecks<float, A>> checks;  // for silent data corruption ([check])
  bool profiling = false;  // output.profile: the layers timed after the first step

  double timeout() const { return config.pipeline.recv_timeout_s; }
  // The run's end on every rank, whatever the code: the observers go before the trainer, the grid last.
  int close(int code) {
    saver.reset();  // after its write in flight (every rank ends at the same boundary: its collectives complete)
    trainer->set_observer({});
    tracer.reset();
    timeline.reset();
    kpipe::comm::free_grid(grid);
    return code;
  }
};

// Every input and output is opened, and every failure agreed on by all ranks, before any work: a path that
// fails on one rank only (rank 0's --metrics, a data file missing on one node) stops every rank at once and is
// reported once (comm/agree.hpp).
template <class A> void open_inputs_and_outputs(TrainingRun<A>& run) {
  using namespace kpipe;
  io::validate_checkpoint_config(run.config.checkpoint);
  comm::agree(run.grid.world, {run.timeout(), "checking the run's inputs and outputs"}, [&] {
    const std::string note = io::settle_async_checkpoints(run.config.checkpoint);
    if (run.rank == 0 && !note.empty()) fmt::print(stderr, "kpipe-train: note: {}\n", note);
    // Starting from a checkpoint's weights: in its tokenizer's tokens (checkpoint.init_from).
    const auto& init_from = run.config.checkpoint.init_from;
    run.corpus = init_from.empty()
                     ? data::load_corpus(run.config.data, run.config.train.seed, run.config.model.seq_len)
                     : data::load_corpus(run.config.data, run.config.train.seed, run.config.model.seq_len,
                                         io::read_checkpoint_tokenizer(init_from));
    data::fit_vocabulary(run.config.model, run.corpus);  // the data's vocabulary (a BPE token file's) sizes the model
    run.metrics = std::make_unique<runtime::MetricsWriter>(run.rank == 0 ? run.config.output.metrics : std::string());
    const auto& profile = run.config.output.profile;
    if (run.rank == 0 && !profile.empty())  // written at the end: checked now
      require_writable(profile, fmt::format("output.profile = '{}'", profile));
  });
}

// A second agreement, which every rank enters: the trainer's constructor has collectives of its own
// (memory.limit_per_rank = auto), which must not meet a rank already agreeing on an input's failure.
template <class A>
void build_trainer(TrainingRun<A>& run, kpipe::comm::TransportKind transport, std::int64_t first_step) {
  using namespace kpipe;
  comm::agree(run.grid.world, {run.timeout(), "setting up the trainer, the trace and the timeline"}, [&] {
    runtime::TrainerOptions options;
    options.transport = transport;
    options.stop_signal = runtime::received_stop_signal;
    options.first_step = first_step;
    options.checkpoint_writing = [&run] { return run.saver && run.saver->writing(); };
    run.trainer = std::make_unique<runtime::Trainer<float, A>>(run.config, run.corpus, run.grid, options);
    // Its snapshot buffer (checkpoint.async, as the trainer settled it) allocated before the first step.
    if (run.checkpoints)
      run.saver = std::make_unique<io::CheckpointSaver<float, A>>(run.trainer->stage(), run.corpus.tokenizer,
                                                                  *run.checkpoints);
    const auto& output = run.config.output;
    // Activation trace and timeline (docs/traces.md): rank 0 gathers and writes both.
    if (!output.trace.empty())
      run.tracer = std::make_unique<io::ActivationTracer<float, A>>(run.trainer->stage(), run.trainer->plan(),
                                                                  io::trace_options(run.config));
    run.checks = std::make_unique<runtime::CorruptionChecks<float, A>>(run.trainer->stage());
    // The trace reads a forward's tensors before the recomputation check runs it again.
    if (run.tracer || run.checks->observes())
      run.trainer->set_observer([&run, trace = run.tracer ? run.tracer->observer() : runtime::ActionObserver()](
                                    const schedule::Action& action, int slot) {
        if (trace) trace(action, slot);
        run.checks->observe(action, slot);
      });
    if (!output.timeline.empty())
      run.timeline = std::make_unique<io::TimelineRecorder>(run.grid, run.config, run.trainer->plan().lists(),
                                                            output.timeline);
  });
  run.profiling = !run.config.output.profile.empty();
}

// Checkpoints, before the trainer: the directory checked and locked, and the checkpoint to resume from chosen
// (checkpoint.resume, checkpoint.fallback), whose step the run is planned from. Written every checkpoint.every
// steps and on SIGUSR1/SIGTERM (the handlers are installed first thing in main).
template <class A>
kpipe::io::ResumePoint open_checkpoints(TrainingRun<A>& run) {
  using namespace kpipe;
  if (!run.config.checkpoint.dir.empty())
    run.checkpoints = std::make_unique<io::CheckpointDir>(run.config.checkpoint, run.grid.world, run.timeout());
  return io::choose_resume_point(run.config.checkpoint, run.grid.world, run.timeout());
}

// What a check for silent data corruption found, the same on every rank: the metrics' record (the batch script
// reads the nodes to exclude there), one line, and the exit code.
template <class A> int stop_on_corruption(TrainingRun<A>& run, const kpipe::runtime::SilentCorruption& corruption) {
  using namespace kpipe;
  run.metrics->write_corruption(corruption);
  if (run.rank == 0) {
    std::string nodes;
    for (const auto& node : corruption.nodes) nodes += (nodes.empty() ? "" : ",") + node;
    fmt::print(stderr, "kpipe-train: {}; nothing of it is checkpointed; exit code {}: resubmit excluding node{} {}\n",
               corruption.what, exit_status(ExitCode::replicas_disagree), corruption.nodes.size() > 1 ? "s" : "", nodes);
  }
  return exit_status(ExitCode::replicas_disagree);
}

// The chosen checkpoint loaded into the trainer's stage and resumed from, then this run's identity. An exit code
// when the run must not start (replicas that loaded the same bytes hold different states).
template <class A> int load_and_resume(TrainingRun<A>& run, const kpipe::io::ResumePoint& point) {
  using namespace kpipe;
  auto& trainer = *run.trainer;
  io::LoadedCheckpoint<float> resumed;
  try {
    resumed = io::load_resume_point(trainer.stage(), point);
    if (!resumed.path.empty()) {
      trainer.resume(resumed.step, resumed.older);
    } else if (const auto& init_from = run.config.checkpoint.init_from; !init_from.empty()) {
      io::load_weights(trainer.stage(), init_from);
      trainer.resume(0);  // the weight versions of an asynchronous run start from these weights
      if (run.rank == 0)
        fmt::print(stderr, "kpipe-train: initialized from {} (its weights; a fresh optimizer at step 0)\n", init_from);
    }
  } catch (const runtime::ReplicasDisagree& e) {
    return stop_on_corruption(run, e.corruption);
  }
  if (run.checkpoints) {
    run.checkpoints->start_run(resumed.run_id);
    if (run.rank == 0 && !run.checkpoints->warning().empty())
      fmt::print(stderr, "kpipe-train: warning: {}\n", run.checkpoints->warning());
  }
  return 0;
}

// The lines that say what the run is, once every rank has agreed that it can start.
template <class A> void announce(const TrainingRun<A>& run, const std::string& optimizer_note) {
  if (run.rank != 0) return;
  const auto& config = run.config;
  const auto& trainer = *run.trainer;
  if (!optimizer_note.empty()) fmt::print(stderr, "kpipe-train: note: {}\n", optimizer_note);
  if (run.grid.world_size > 1)
    fmt::print(stderr, "kpipe-train: {} on {}\n", kpipe::quantity(run.grid.world_size, "rank"),
               kpipe::comm::describe_nodes(run.grid));
  fmt::print(stderr, "kpipe-train: {}\n", trainer.memory_verdict());
  fmt::print(stderr, "kpipe-train: {} parameters, {}, d_model {}, seq_len {}, vocabulary {} ({}), batch {} in {}, "
             "data: {}\n",
             trainer.desc().num_params(), kpipe::quantity(config.model.n_layers, "layer"), config.model.d_model,
             config.model.seq_len, config.model.vocab, kpipe::data::to_string(run.corpus.tokenizer.kind()),
             config.train.batch, kpipe::quantity(config.train.microbatches, "micro-batch"), run.corpus.source);
}

// A run resumed at or past train.steps (a finished run requeued or resubmitted): one line, exit 0, on any layout.
template <class A> int nothing_to_train(TrainingRun<A>& run) {
  const std::uint64_t checksum = run.trainer->param_checksum();  // collective
  if (run.rank == 0)
    fmt::print(stderr, "kpipe-train: nothing left to train: resumed at step {}, train.steps = {} (param_checksum {})\n",
               run.trainer->next_step(), run.config.train.steps, kpipe::runtime::checksum_hex(checksum));
  return kpipe::exit_status(kpipe::ExitCode::ok);
}

// What the run does after a checkpoint that failed: what checkpoint.on_failure says, stop (a stop signal's
// checkpoint), or end with the exit code it already has.
enum class AfterFailure { policy, stop, exit };

// Records and says on rank 0 what became of the checkpoint of `step`, written in `seconds` (`beside`: beside
// the training): written; not written because another run's of the same step is kept (checkpoint.other_runs =
// "keep": training goes on); or failed (then `latest` and the older ones are unchanged) and what the run does
// next. True when written, or kept another run's and the run goes on.
template <class A>
bool report_checkpoint(const TrainingRun<A>& run, const kpipe::io::SaveResult& result, std::int64_t step,
                       AfterFailure after, double seconds, bool beside) {
  using namespace kpipe;
  const std::string stop = fmt::format("stopping with exit code {}", exit_status(ExitCode::checkpoint_failed));
  if (result.ok) {
    run.metrics->write_checkpoint(step, result.path, seconds);
    if (run.rank == 0) {
      fmt::print(stderr, "kpipe-train: checkpoint written: {} (step {}) in {:.2f} s{}\n", result.path, step, seconds,
                 beside ? ", written beside the training" : "");
      if (!result.warning.empty()) fmt::print(stderr, "kpipe-train: warning: {}\n", result.warning);
    }
    return true;
  }
  if (result.skipped) {
    if (run.rank == 0)
      fmt::print(stderr, "kpipe-train: warning: {}; {}\n", result.message,
                 after == AfterFailure::stop ? "nothing saved, " + stop : std::string("training goes on"));
    return after != AfterFailure::stop;
  }
  const bool stops = after == AfterFailure::stop ||
                     (after == AfterFailure::policy && run.config.checkpoint.on_failure == CheckpointFailure::stop);
  if (run.rank == 0)
    fmt::print(stderr, "kpipe-train: {}; `latest` and the older checkpoints are unchanged{}\n", result.message,
               after == AfterFailure::exit ? ""
               : stops                     ? "; " + stop
                                           : std::string("; training goes on (checkpoint.on_failure = continue)"));
  return false;
}

// The checkpoint write in flight beside the training, if any, finished (waited for where it has not ended on
// this rank: every rank calls this at the same boundary) and reported. True when written or none was in flight.
template <class A> bool finish_write(TrainingRun<A>& run, AfterFailure after) {
  auto& saver = *run.saver;
  if (!saver.in_flight()) return true;
  const std::int64_t step = saver.in_flight_step();
  const kpipe::io::SaveResult result = saver.finish();
  return report_checkpoint(run, result, step, after, saver.write_seconds(), true);
}

// Writes a checkpoint of the step reached: beside the training (checkpoint.async: a write still in flight is
// finished first, and the training goes on once the snapshot is taken), or while it waits (synchronous saves,
// and a stop signal's checkpoint: `stopping`, the run ends after it). What the training waited for goes into the
// next step's metrics. False when a checkpoint failed: the one in flight or, stopping, this one.
template <class A> bool write_checkpoint(TrainingRun<A>& run, StepLog& log, bool stopping) {
  using namespace kpipe;
  auto& saver = *run.saver;
  const std::int64_t step = run.trainer->next_step();
  const double start = seconds_now();
  const std::int64_t previous = saver.in_flight_step();
  const AfterFailure after = stopping ? AfterFailure::stop : AfterFailure::policy;
  bool ok = finish_write(run, after);
  if (previous >= 0 && saver.waited_seconds() > 0 && run.rank == 0)
    fmt::print(stderr, "kpipe-train: the checkpoint of step {} waited {:.3f} s for the write of step {} still in flight\n",
               step, saver.waited_seconds(), previous);
  const auto write_now = [&] {
    const double began = seconds_now();
    const io::SaveResult result = saver.write(step);
    return report_checkpoint(run, result, step, after, seconds_now() - began, false);
  };
  if (stopping) {
    ok = write_now();
  } else if (ok || run.config.checkpoint.on_failure == CheckpointFailure::keep_training) {
    if (saver.background())
      saver.start(step);
    else
      ok = write_now() && ok;
  }
  log.checkpoint_wait(step, seconds_now() - start);
  return ok;
}

// The one place the loop reads the trainer's step reports: those settled since the last call, recorded in
// order (and, with a timeline, the last one beside its step's actions and the checkpoint work since). A report
// that says every rank's checkpoint write in flight has ended takes its outcome, on every rank at the same
// boundary. An exit code when the run must stop.
template <class A> int record_reports(TrainingRun<A>& run, StepLog& log) {
  using namespace kpipe;
  const auto& trainer = *run.trainer;
  const auto reports = run.trainer->take_reports();
  auto checkpoint_work = run.saver ? run.saver->take_spans() : std::vector<io::CheckpointSpan>{};
  if (run.timeline && !reports.empty())
    run.timeline->record(reports.back(), trainer.record().timeline, trainer.record().timeline_origin,
                         checkpoint_work);
  for (const auto& stats : reports) {
    if (const int code = log.record(stats, trainer.steady_step(stats.step))) return code;
    const bool ended = run.saver && run.saver->in_flight() && stats.step >= run.saver->in_flight_step() &&
                       !stats.checkpoint_writing;  // reported after the write began: it has ended everywhere
    if (ended && !finish_write(run, AfterFailure::policy) && run.config.checkpoint.on_failure == CheckpointFailure::stop)
      return exit_status(ExitCode::checkpoint_failed);
  }
  return 0;
}

// A stop signal every rank learnt from the same report after step `s`: the steps run since that report are
// recorded first, so that the metrics end where the checkpoint does; then a checkpoint write in flight is
// finished, and the current step's checkpoint written while the training waits (unless step s wrote one:
// `saved`, or started it beside the training); then the signal's exit code.
template <class A> int stop_on_signal(TrainingRun<A>& run, StepLog& log, int s, bool saved) {
  using namespace kpipe;
  const int stop_signal = log.stop_signal();
  run.trainer->settle();
  if (const int code = record_reports(run, log)) return code;
  if (run.config.checkpoint.dir.empty()) {
    if (run.rank == 0)
      fmt::print(stderr, "kpipe-train: signal {} after step {}: no checkpoint.dir, nothing saved\n", stop_signal,
                 step_number(s));
    return exit_status(ExitCode::failure);
  }
  const bool started_here = run.saver->in_flight() && run.saver->in_flight_step() == run.trainer->next_step();
  if (started_here ? !finish_write(run, AfterFailure::stop) : !saved && !write_checkpoint(run, log, true))
    return exit_status(ExitCode::checkpoint_failed);
  const int code = runtime::stop_exit_code(stop_signal);
  if (run.rank == 0)
    fmt::print(stderr, "kpipe-train: signal {} after step {}: checkpointed; exiting with code {} ({})\n", stop_signal,
               step_number(s), code,
               code == exit_status(ExitCode::checkpointed_on_signal) ? "requeue me" : "terminated");
  return code;
}

// One pass of the loop: run step `s`, record it, checkpoint when due, stop on a signal, evaluate when due. An
// exit code when the run ends here.
template <class A> std::optional<int> train_step(TrainingRun<A>& run, StepLog& log, int s) {
  using namespace kpipe;
  const auto& config = run.config;
  auto& trainer = *run.trainer;
  if (run.tracer) run.tracer->begin_step(s);
  run.checks->before_step(s);
  trainer.run_step();
  log.time_step(s, trainer.record().timeline, trainer.steady_step(s));
  if (run.tracer) run.tracer->end_step();
  if (run.profiling && s == log.first_step()) trainer.stage().profile_layers(true);  // the first step allocates
  const std::int64_t n = step_number(s);
  const bool last = n == config.train.steps;
  // The last step's checkpoint too: a finished run leaves its weights, and a requeued one resumes from them.
  const bool checkpoint_due =
      (config.checkpoint.every > 0 && n % config.checkpoint.every == 0) || (last && !config.checkpoint.dir.empty());
  const bool eval_due = config.train.eval_every > 0 && n % config.train.eval_every == 0 && !last;
  // An asynchronous step's report completes during the next step. The run's end, a checkpoint's step (its
  // metrics complete when it is written), an evaluation and the timeline (its rows carry the step's loss) take
  // this step's now.
  if (last || checkpoint_due || eval_due || run.timeline) trainer.settle();
  if (const int code = record_reports(run, log)) return code;
  // Before any checkpoint of this step (a stop signal's too): nothing the replicas disagree on is written.
  if (const auto corruption = run.checks->after_step(s, checkpoint_due || log.stop_signal()))
    return stop_on_corruption(run, *corruption);
  bool saved = false;
  if (checkpoint_due) {
    saved = write_checkpoint(run, log, false);
    if (!saved && config.checkpoint.on_failure == CheckpointFailure::stop)
      return exit_status(ExitCode::checkpoint_failed);
  }
  if (log.stop_signal()) return stop_on_signal(run, log, s, saved);
  if (eval_due) {
    const double val = trainer.evaluate();
    run.metrics->write_validation(n, val);
    if (run.rank == 0) fmt::print(stderr, "step {:>5} | validation loss {:.4f}\n", n, val);
  }
  return std::nullopt;
}

// The pipeline's figures: the measured bubble beside the simulator's, per rank with the stash and the slots.
void print_pipeline_report(const kpipe::runtime::PipelineReport& report) {
  std::string ranks;
  for (std::size_t k = 0; k < report.measured_bubble.size(); ++k)
    ranks += fmt::format(" {}:{:.3f}/{:.3f}/{}/{}/{}", k, report.measured_bubble[k], report.simulated_bubble[k],
                         report.peak_stash[k], report.predicted_stash[k], report.allocated_slots[k]);
  fmt::print(stderr,
             "pipeline: bubble measured {:.3f}, simulated {:.3f} (measured F {:.2f} ms, B {:.2f} ms, I {:.2f} ms, "
             "W {:.2f} ms per chunk; a message {:.1f} us + {:.1f} us per MiB)\n  per rank (bubble "
             "measured/simulated, peak stash measured/predicted, slots allocated):{}\n",
             report.measured_mean, report.simulated_mean, 1e3 * report.cost_f, 1e3 * report.cost_b,
             1e3 * report.cost_i, 1e3 * report.cost_w, 1e6 * report.messages.latency,
             1e6 * report.messages.per_byte * (1 << 20), ranks);
}

// After the last step: the pipeline report, the layer profile, the validation loss, the memory report and the
// final metrics. The exit code.
template <class A> int finish(TrainingRun<A>& run, const StepLog& log) {
  using namespace kpipe;
  const auto& config = run.config;
  auto& trainer = *run.trainer;
  const double seconds = log.seconds();
  const auto report = trainer.pipeline_report(log.pipeline_time());
  if (run.rank == 0 && config.pipeline.pipeline_size > 1) print_pipeline_report(report);
  if (run.profiling) {
    trainer.stage().profile_layers(false);
    runtime::write_layer_profile(trainer.stage(), config.output.profile,
                                 log.optimizer_seconds() / std::max(log.counted_steps(), 1), log.counted_steps());
    if (run.rank == 0) fmt::print(stderr, "kpipe-train: layer profile written: {}\n", config.output.profile);
  }
  runtime::FinalMetrics final;
  final.val_loss = trainer.evaluate();  // before the memory report: evaluation's buffers are predicted too
  const auto memory = runtime::memory_report(trainer.stage(), trainer.plan(), run.meter);
  if (run.rank == 0)
    fmt::print(stderr, "memory per rank, MiB predicted/measured (memory.recompute = {}):\n{}\n", config.memory.recompute,
               runtime::format_memory_report(memory));
  final.memory_predicted = memory.predicted;
  final.memory_measured = memory.measured;
  final.measured_bubble = report.measured_mean;
  final.simulated_bubble = report.simulated_mean;
  final.steps = trainer.next_step();
  final.skipped_steps = log.skipped_steps();
  final.param_checksum = trainer.param_checksum();
  final.seconds = seconds;
  final.tokens_per_s = seconds > 0 ? double(log.tokens()) / seconds : 0;
  final.steady_tokens_per_s = log.steady_tokens_per_s();
  final.num_params = trainer.desc().num_params();
  run.metrics->write_final(final);
  // This run's steps (a resumed run's are not all of them), its time and throughput.
  const std::int64_t ran = final.steps - log.first_step();
  if (run.rank == 0)
    fmt::print(stderr,
               "done: {}{} in {} | validation loss {:.4f} | {:.0f} tok/s (median step after the first: {:.0f}) | "
               "param_checksum {}\n",
               quantity(ran, "step"),
               log.first_step() > 0 ? fmt::format(" (steps {} to {}, resumed at step {})",
                                                  step_number(log.first_step()), final.steps, log.first_step())
                                    : std::string(),
               duration(seconds), final.val_loss, final.tokens_per_s, final.steady_tokens_per_s,
               runtime::checksum_hex(final.param_checksum));
  return exit_status(ExitCode::ok);
}

// What the command line asked for, resolved.
struct Job {
  kpipe::Config config;
  std::string optimizer_note;  // what the lr rule of an asynchronous schedule chose or found (async_rules.hpp)
  bool exit_now = false;       // --help: printed
  int exit_code = 0;
};

// The run: set up, the loop, finish, as llm.c's main reads. Errors before `program.set_up` are the same on every
// rank (agreed), errors after it may be one rank's alone.
template <class A> int train(const Job& job, kpipe::comm::TransportKind transport, kpipe::apps::MpiProgram& program) {
  TrainingRun<A> run(job.config, program.rank);
  open_inputs_and_outputs(run);
  const kpipe::io::ResumePoint resume_point = open_checkpoints(run);
  build_trainer(run, transport, resume_point.step);
  if (const int code = load_and_resume(run, resume_point)) return run.close(code);
  program.set_up = true;
  if (run.trainer->next_step() >= run.config.train.steps) return run.close(nothing_to_train(run));
  announce(run, job.optimizer_note);
  const int first_step = int(run.trainer->next_step());  // > 0 when resumed
  StepLog log(run.config, run.rank, first_step, *run.metrics);
  for (int s = first_step; s < run.config.train.steps; ++s)
    if (const auto code = train_step(run, log, s)) {
      if (run.saver) finish_write(run, AfterFailure::exit);  // its outcome said, whatever ends the run
      return run.close(*code);
    }
  // The last checkpoint write beside the training ends before the run's report.
  if (run.saver && !finish_write(run, AfterFailure::policy) &&
      run.config.checkpoint.on_failure == kpipe::CheckpointFailure::stop)
    return run.close(kpipe::exit_status(kpipe::ExitCode::checkpoint_failed));
  return run.close(finish(run, log));
}

// The command line: kpipe's configuration keys and kpipe-train's own flags; the lr rule of an asynchronous
// schedule resolved into the configuration, so that the metrics' and the checkpoints' copy of it hold what ran.
Job parse_job(int argc, char** argv) {
  // The configuration decides how Kokkos starts (threads per rank; the GPU follows the node-local rank), so
  // Kokkos' own command-line options have no say.
  for (int i = 1; i < argc; ++i)
    kpipe::require(std::string(argv[i]).rfind("--kokkos", 0) != 0,
                   "{}: kpipe-train starts Kokkos itself: set host threads with --pipeline.threads_per_rank (each "
                   "rank drives the GPU of its node-local rank); other Kokkos settings through KOKKOS_* "
                   "environment variables",
                   argv[i]);
  bool resume = false, trace_full = false;
  const auto command_line = kpipe::parse_command_line("kpipe-train", argc, argv, [&](CLI::App& app) {
    app.add_flag("--resume", resume, "resume from the checkpoint `latest` names in --checkpoint-dir (none: start)")
        ->group("[checkpoint]");
    app.add_flag("--trace-full", trace_full, "also trace the full tensors of micro-batch 0 (output.trace_full = 1)")
        ->group("[output]");
    app.footer(kpipe::exit_codes_help(kpipe::ProgramName::train));
  });
  Job job;
  job.config = command_line.config;
  job.exit_now = command_line.exit_now;
  job.exit_code = command_line.exit_code;
  // Starting from a checkpoint's weights: its model (every rank reads it; a failure is agreed by all).
  if (const auto& init_from = job.config.checkpoint.init_from; !init_from.empty() && !job.exit_now)
    kpipe::comm::agree(MPI_COMM_WORLD, {job.config.pipeline.recv_timeout_s, "reading checkpoint.init_from"}, [&] {
      job.config.model = kpipe::io::init_from_model(init_from, command_line.given, job.config.model);
    });
  const auto optimizer = kpipe::runtime::choose_optimizer(job.config, command_line.preset.optim, command_line.given);
  job.config.optim = optimizer.optim;
  job.optimizer_note = optimizer.note;
  kpipe::validate(job.config);  // an optim.min_lr given above the lr chosen
  if (resume) job.config.checkpoint.resume = "latest";
  if (trace_full) job.config.output.trace_full = 1;
  return job;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: a batch system's SIGUSR1 or SIGTERM that arrives during start-up is recorded and
  // acted on after the first step, instead of killing the job with nothing saved.
  kpipe::runtime::install_stop_handlers();
  // MPI_THREAD_MULTIPLE: checkpoints written beside the training run their collectives from a thread of their own
  // (io/checkpoint_saver.hpp; without it checkpoint.async falls back or is refused).
  return kpipe::apps::run_mpi_program(kpipe::ProgramName::train, "kpipe-train", argc, argv,
                                     [](kpipe::apps::MpiProgram& program) {
    Job job = parse_job(program.argc, program.argv);
    program.finalize_timeout_s = job.config.pipeline.recv_timeout_s;
    if (job.exit_now) return job.exit_code;
    const auto placement = kpipe::runtime::place_rank(job.config.pipeline, MPI_COMM_WORLD);
    if (program.rank == 0 && !placement.note.empty()) fmt::print(stderr, "kpipe-train: note: {}\n", placement.note);
    job.config.pipeline.transport = kpipe::runtime::resolved_choice(placement.transport);
    kpipe::runtime::KokkosSession kokkos(placement);
    return kpipe::apps::with_storage_type(job.config.train.precision, [&](auto storage) {
      return train<typename decltype(storage)::type>(job, placement.transport, program);
    });
  }, MPI_THREAD_MULTIPLE);
}
