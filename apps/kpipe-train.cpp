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
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/timeline.hpp"
#include "kpipe/io/trace.hpp"
#include "kpipe/memory/meter.hpp"
#include "kpipe/runtime/async_rules.hpp"
#include "kpipe/runtime/layer_profile.hpp"
#include "kpipe/runtime/memory_report.hpp"
#include "kpipe/runtime/metrics.hpp"
#include "kpipe/runtime/pipeline_report.hpp"
#include "kpipe/runtime/placement.hpp"
#include "kpipe/runtime/signals.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace {

std::string duration(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60) : fmt::format("{}m{:02d}s", s / 60, s % 60);
}

// Fault injection for kpipe's own tests, from the environment of kpipe-train (the library reads none):
// KPIPE_TEST_PAUSE_IN_CHECKPOINT="<step>:<seconds>" pauses every writer of that step's checkpoint half-way.
struct FaultInjection {
  kpipe::io::CheckpointDir::Pause pause;
};

FaultInjection fault_injection() {
  FaultInjection f;
  if (const char* pause = std::getenv("KPIPE_TEST_PAUSE_IN_CHECKPOINT")) {
    long long step = -1;
    if (std::sscanf(pause, "%lld:%lf", &step, &f.pause.seconds) == 2) f.pause.step = step;
  }
  return f;
}

// What the run learns from its steps' reports as they arrive (an asynchronous step's a step late,
// runtime/trainer.hpp): each step's metrics and log line, the figures of the steady steps, the non-finite
// steps in a row, and the stop signal the world agreed on. Every rank gets the same reports, so every rank
// decides alike.
class StepLog {
 public:
  StepLog(const kpipe::Config& config, int rank, std::int64_t first_step, kpipe::runtime::MetricsWriter& metrics,
          std::function<bool(std::int64_t)> steady_step)
      : config_(&config), rank_(rank), first_step_(first_step), metrics_(&metrics), steady_step_(std::move(steady_step)) {}

  // Records the reports in order. Returns an exit code when the run must stop (train.max_skipped_steps
  // non-finite steps in a row), 0 to go on.
  int record(const std::vector<kpipe::runtime::StepStats>& reports) {
    for (const auto& stats : reports)
      if (const int code = record(stats)) return code;
    return 0;
  }

  int stop_signal() const { return stop_signal_; }  // 0: none
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  std::int64_t tokens() const { return tokens_; }
  // Over the steady steps after the first (which allocates), as the simulator's figures.
  double busy_seconds() const { return busy_; }
  double pipeline_seconds() const { return pipeline_seconds_; }
  double optimizer_seconds() const { return optimizer_seconds_; }
  int counted_steps() const { return counted_steps_; }
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
  int record(const kpipe::runtime::StepStats& stats) {
    using namespace kpipe;
    const auto& train = config_->train;
    const std::int64_t s = stats.step;
    // A non-finite loss or gradient: the trainer skipped the update on every rank alike; say so, and stop
    // after train.max_skipped_steps in a row.
    skipped_in_a_row_ = stats.skipped ? skipped_in_a_row_ + 1 : 0;
    if (stats.skipped && rank_ == 0)
      fmt::print(stderr, "kpipe-train: step {} skipped: loss {} grad norm {} not finite ({} in a row)\n", s + 1,
                 stats.loss, stats.grad_norm, skipped_in_a_row_);
    tokens_ += stats.tokens;
    const double rate = stats.seconds > 0 ? double(stats.tokens) / stats.seconds : 0;
    if (s > first_step_) {
      steady_rates_.push_back(rate);
    } else {
      first_rate_ = rate;
    }
    // Asynchronous schedules: the steady state's steps (no warm-up, no drain).
    if ((s > first_step_ || train.steps == first_step_ + 1) && steady_step_(s)) {
      busy_ += stats.busy_seconds;
      pipeline_seconds_ += stats.pipeline_seconds;
      optimizer_seconds_ += stats.optimizer_seconds;
      ++counted_steps_;
    }
    metrics_->write_step(stats);
    if (stats.stop_signal && !stop_signal_) stop_signal_ = stats.stop_signal;
    if (train.max_skipped_steps > 0 && skipped_in_a_row_ >= train.max_skipped_steps) {
      if (rank_ == 0)
        fmt::print(stderr, "kpipe-train: stopping: {} steps in a row with a non-finite loss or gradient "
                           "(train.max_skipped_steps = {}); exit code {}\n",
                   skipped_in_a_row_, train.max_skipped_steps, exit_status(ExitCode::non_finite));
      return exit_status(ExitCode::non_finite);
    }
    if (rank_ == 0 && (s % train.log_every == 0 || s + 1 == train.steps)) {
      const double elapsed = seconds();
      fmt::print(stderr, "step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}\n", s + 1,
                 train.steps, stats.loss, stats.lr, stats.grad_norm, double(tokens_) / elapsed,
                 duration(elapsed / double(s + 1 - first_step_) * double(train.steps - s - 1)));
    }
    return 0;
  }

  const kpipe::Config* config_;
  int rank_;
  std::int64_t first_step_;  // > 0 when resumed
  kpipe::runtime::MetricsWriter* metrics_;
  std::function<bool(std::int64_t)> steady_step_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::int64_t tokens_ = 0;
  double busy_ = 0, pipeline_seconds_ = 0, optimizer_seconds_ = 0;
  int counted_steps_ = 0;
  std::vector<double> steady_rates_;  // tokens / seconds of each step after the first
  double first_rate_ = 0;
  int skipped_in_a_row_ = 0;
  int stop_signal_ = 0;
};

// A: what activations and messages are stored in (float, or bf16 under train.precision = bf16).
// optimizer_note: what the lr rule of an asynchronous schedule chose or found (async_rules.hpp), said once
// the run is set up (a refused run says only why). set_up becomes true once every rank has agreed that the run
// can start: errors before that are the same on every rank (agreed), errors after it may be one rank's alone.
template <class A>
int train(kpipe::Config config, const std::string& optimizer_note, kpipe::comm::TransportKind transport, int rank,
          bool& set_up) {
  using namespace kpipe;
  auto grid = comm::make_grid(MPI_COMM_WORLD, config.pipeline.pipeline_size, config.pipeline.data_parallel,
                               config.pipeline.recv_timeout_s);
  const double timeout = config.pipeline.recv_timeout_s;
  memory::Meter meter;  // every Kokkos allocation from here on, by category, beside the plan's prediction
  io::validate_checkpoint_config(config.checkpoint);
  // Every input and output is opened, and every failure agreed on by all ranks, before any work: a path
  // that fails on one rank only (rank 0's --metrics, a data file missing on one node) stops every rank at
  // once and is reported once (comm/agree.hpp).
  data::Corpus corpus;
  std::unique_ptr<runtime::MetricsWriter> metrics_writer;
  std::unique_ptr<runtime::Trainer<float, A>> trainer_owner;
  std::unique_ptr<io::ActivationTracer<float, A>> tracer;
  std::unique_ptr<io::TimelineRecorder> timeline;
  const FaultInjection faults = fault_injection();
  comm::agree(grid.world, {timeout, "checking the run's inputs and outputs"}, [&] {
    corpus = data::load_corpus(config.data, config.train.seed, config.model.seq_len);
    data::fit_vocabulary(config.model, corpus);  // the data's vocabulary (a BPE token file's, say) sizes the model
    metrics_writer = std::make_unique<runtime::MetricsWriter>(rank == 0 ? config.output.metrics : std::string());
    if (rank == 0 && !config.output.profile.empty())  // written at the end: checked now
      require_writable(config.output.profile, fmt::format("output.profile = '{}'", config.output.profile));
  });
  // A second agreement, which every rank enters: the trainer's constructor has collectives of its own
  // (memory.limit_per_rank = auto), which must not meet a rank already agreeing on an input's failure.
  comm::agree(grid.world, {timeout, "setting up the trainer, the trace and the timeline"}, [&] {
    runtime::TrainerOptions options;
    options.transport = transport;
    options.stop_signal = runtime::received_stop_signal;
    trainer_owner = std::make_unique<runtime::Trainer<float, A>>(config, corpus, grid, options);
    // Activation trace and timeline (docs/traces.md): rank 0 gathers and writes both.
    if (!config.output.trace.empty()) {
      tracer = std::make_unique<io::ActivationTracer<float, A>>(trainer_owner->stage(), trainer_owner->plan(),
                                                             io::trace_options(config));
      trainer_owner->set_observer(tracer->observer());
    }
    if (!config.output.timeline.empty())
      timeline = std::make_unique<io::TimelineRecorder>(grid, config, trainer_owner->plan().lists(),
                                                        config.output.timeline);
  });
  auto& metrics = *metrics_writer;
  auto& trainer = *trainer_owner;
  // Checkpoints: the directory checked and locked, resume (checkpoint.resume), then this run's identity;
  // written every checkpoint.every steps and on SIGUSR1/SIGTERM (the handlers are installed first thing in
  // main).
  std::unique_ptr<io::CheckpointDir> checkpoints;
  if (!config.checkpoint.dir.empty()) {
    checkpoints = std::make_unique<io::CheckpointDir>(config.checkpoint, grid.world, timeout);
    checkpoints->pause_in_write(faults.pause);
  }
  const auto resumed = io::resume_training(trainer.stage(), config.checkpoint);
  if (!resumed.path.empty()) trainer.resume(resumed.step, resumed.older);
  if (checkpoints) {
    checkpoints->start_run(resumed.run_id);
    if (rank == 0 && !checkpoints->warning().empty()) fmt::print(stderr, "kpipe-train: warning: {}\n", checkpoints->warning());
  }
  if (rank == 0 && trainer.next_step() >= config.train.steps)
    fmt::print(stderr, "kpipe-train: the checkpoint's step {} is not below train.steps = {}: no step to train\n",
               trainer.next_step(), config.train.steps);
  // A checkpoint that could not be written leaves `latest` and the older ones as they were. True when
  // written; `stopping`: the run ends after it whatever happens (a stop signal).
  auto save = [&](bool stopping) {
    const io::SaveResult result = io::save_checkpoint(trainer.stage(), trainer.next_step(), corpus.tokenizer, *checkpoints);
    if (rank == 0 && result.ok) {
      fmt::print(stderr, "kpipe-train: checkpoint written: {} (step {})\n", result.path, trainer.next_step());
      if (!result.warning.empty()) fmt::print(stderr, "kpipe-train: warning: {}\n", result.warning);
    }
    if (rank == 0 && !result.ok)
      fmt::print(stderr, "kpipe-train: {}; `latest` and the older checkpoints are unchanged; {}\n", result.message,
                 stopping || config.checkpoint.on_failure == CheckpointFailure::stop
                     ? fmt::format("stopping with exit code {}", exit_status(ExitCode::checkpoint_failed))
                     : std::string("training goes on (checkpoint.on_failure = continue)"));
    return result.ok;
  };
  auto finish = [&](int code) {
    trainer.set_observer({});
    tracer.reset();
    timeline.reset();
    comm::free_grid(grid);
    return code;
  };
  set_up = true;
  if (rank == 0 && !optimizer_note.empty()) fmt::print(stderr, "kpipe-train: note: {}\n", optimizer_note);
  const auto& desc = trainer.desc();
  if (rank == 0)
    fmt::print(stderr, "kpipe-train: {} parameters, {} layers, d_model {}, seq_len {}, vocabulary {} ({}), batch {} x {} "
               "micro-batches, data: {}\n",
               desc.num_params(), config.model.n_layers, config.model.d_model, config.model.seq_len, config.model.vocab,
               data::to_string(corpus.tokenizer.kind()), config.train.batch, config.train.microbatches, corpus.source);

  const bool profiling = !config.output.profile.empty();
  const int first_step = int(trainer.next_step());  // > 0 when resumed
  StepLog log(config, rank, first_step, metrics, [&](std::int64_t step) { return trainer.steady_step(step); });
  for (int s = first_step; s < config.train.steps; ++s) {
    if (tracer) tracer->begin_step(s);
    trainer.run_step();
    if (tracer) tracer->end_step();
    if (profiling && s == first_step) trainer.stage().profile_layers(true);  // the first step allocates: not timed
    const bool last = s + 1 == config.train.steps;
    const bool checkpoint_due = config.checkpoint.every > 0 && (s + 1) % config.checkpoint.every == 0;
    const bool eval_due = config.train.eval_every > 0 && (s + 1) % config.train.eval_every == 0 && !last;
    // An asynchronous step's report completes during the next step. The run's end, a checkpoint's step (its
    // metrics complete when it is written), an evaluation and the timeline (its rows carry the step's loss) take
    // this step's now.
    if (last || checkpoint_due || eval_due || timeline) trainer.settle();
    const auto reports = trainer.take_reports();
    if (timeline) timeline->record(reports.back(), trainer.executor().timeline());
    if (const int code = log.record(reports)) return finish(code);
    bool saved = false;
    if (checkpoint_due) {
      saved = save(false);
      if (!saved && config.checkpoint.on_failure == CheckpointFailure::stop) return finish(exit_status(ExitCode::checkpoint_failed));
    }
    if (const int stop_signal = log.stop_signal()) {  // every rank learnt it from the same report
      // The steps run since the report that brought it are reported first, so the metrics end where the
      // checkpoint does.
      trainer.settle();
      if (const int code = log.record(trainer.take_reports())) return finish(code);
      if (config.checkpoint.dir.empty()) {
        if (rank == 0) fmt::print(stderr, "kpipe-train: signal {} after step {}: no checkpoint.dir, nothing saved\n", stop_signal, s + 1);
        return finish(1);
      }
      if (!saved && !save(true)) return finish(exit_status(ExitCode::checkpoint_failed));
      const int code = runtime::stop_exit_code(stop_signal);
      if (rank == 0)
        fmt::print(stderr, "kpipe-train: signal {} after step {}: checkpointed; exiting with code {} ({})\n", stop_signal,
                   s + 1, code, code == exit_status(ExitCode::checkpointed_on_signal) ? "requeue me" : "terminated");
      return finish(code);
    }
    if (eval_due) {
      const double val = trainer.evaluate();
      if (rank == 0) fmt::print(stderr, "step {:>5} | validation loss {:.4f}\n", s + 1, val);
    }
  }
  const double seconds = log.seconds();
  const auto report = runtime::pipeline_report(trainer.stage(), trainer.plan(), trainer.executor(), log.busy_seconds(),
                                               log.pipeline_seconds());
  if (rank == 0 && config.pipeline.pipeline_size > 1) {
    std::string ranks;
    for (int k = 0; k < grid.pipeline_size; ++k)
      ranks += fmt::format(" {}:{:.3f}/{:.3f}/{}/{}/{}", k, report.measured_bubble[k], report.simulated_bubble[k],
                           report.peak_stash[k], report.predicted_stash[k], report.allocated_slots[k]);
    fmt::print(stderr,
               "pipeline: bubble measured {:.3f}, simulated {:.3f} (measured F {:.2f} ms, B {:.2f} ms, I {:.2f} ms, "
               "W {:.2f} ms per chunk)\n  per rank (bubble measured/simulated, peak stash measured/predicted, slots "
               "allocated):{}\n",
               report.measured_mean, report.simulated_mean, 1e3 * report.cost_f, 1e3 * report.cost_b,
               1e3 * report.cost_i, 1e3 * report.cost_w, ranks);
  }
  if (profiling) {
    trainer.stage().profile_layers(false);
    runtime::write_layer_profile(trainer.stage(), config.output.profile,
                                 log.optimizer_seconds() / std::max(log.counted_steps(), 1), log.counted_steps());
    if (rank == 0) fmt::print(stderr, "kpipe-train: layer profile written: {}\n", config.output.profile);
  }
  runtime::FinalMetrics final;
  final.val_loss = trainer.evaluate();  // before the memory report: evaluation's buffers are predicted too
  const auto memory = runtime::memory_report(trainer.stage(), trainer.plan(), meter);
  if (rank == 0)
    fmt::print(stderr, "memory per rank, MiB predicted/measured (memory.recompute = {}):\n{}\n", config.memory.recompute,
               runtime::format_memory_report(memory));
  final.memory_predicted = memory.predicted;
  final.memory_measured = memory.measured;
  final.measured_bubble = report.measured_mean;
  final.simulated_bubble = report.simulated_mean;
  final.steps = trainer.next_step();
  final.param_checksum = trainer.param_checksum();
  final.seconds = seconds;
  final.tokens_per_s = seconds > 0 ? double(log.tokens()) / seconds : 0;
  final.steady_tokens_per_s = log.steady_tokens_per_s();
  final.num_params = desc.num_params();
  metrics.write_final(final);
  if (rank == 0)
    fmt::print(stderr,
               "done: {} steps in {} | validation loss {:.4f} | {:.0f} tok/s (median step after the first: {:.0f}) | "
               "param_checksum {}\n",
               final.steps, duration(seconds), final.val_loss, final.tokens_per_s, final.steady_tokens_per_s,
               runtime::checksum_hex(final.param_checksum));
  return finish(0);
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: a batch system's SIGUSR1 or SIGTERM that arrives during start-up is recorded and
  // acted on after the first step, instead of killing the job with nothing saved.
  kpipe::runtime::install_stop_handlers();
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int rc = 0;
  double timeout = kpipe::PipelineConfig{}.recv_timeout_s;
  bool set_up = false;
  try {
    // The configuration comes first: it decides how Kokkos starts (threads per rank; the GPU follows the
    // node-local rank), so Kokkos' own command-line options have no say.
    for (int i = 1; i < argc; ++i)
      kpipe::require(std::string(argv[i]).rfind("--kokkos", 0) != 0,
                     "{}: kpipe-train starts Kokkos itself: set host threads with --pipeline.threads_per_rank (each "
                     "rank drives the GPU of its node-local rank); other Kokkos settings through KOKKOS_* "
                     "environment variables",
                     argv[i]);
    bool resume = false;
    bool trace_full = false;
    const auto command_line =
        kpipe::parse_command_line("kpipe-train", argc, argv, [&](CLI::App& app) {
          app.add_flag("--resume", resume, "resume from the checkpoint `latest` names in --checkpoint-dir (none: start)")
              ->group("[checkpoint]");
          app.add_flag("--trace-full", trace_full, "also trace the full tensors of micro-batch 0 (output.trace_full = 1)")
              ->group("[output]");
          app.footer(
              "Exit codes: 0 done; 1 failure; 2 bad input (config, data, checkpoint; every rank alike); 3 a rank\n"
              "stopped answering (a receive or collective waited pipeline.recv_timeout_s: the job is aborted);\n"
              "4 stopped after train.max_skipped_steps steps in a row with a non-finite loss or gradient; 5 a\n"
              "checkpoint could not be written (checkpoint.on_failure = stop, or on a stop signal; `latest` is\n"
              "unchanged); 75 SIGUSR1 arrived and a checkpoint was written: requeue the job with --resume; 143\n"
              "the same on SIGTERM (the job is being ended: not to be requeued).");
        });
    auto config = command_line.config;
    timeout = config.pipeline.recv_timeout_s;
    // Asynchronous schedules: the lr schedule their delay calls for, unless the user chose it. Resolved into
    // the configuration, so that the metrics' and the checkpoints' copy of it hold what ran.
    const auto optimizer = kpipe::runtime::choose_optimizer(config, command_line.preset.optim, command_line.given);
    config.optim = optimizer.optim;
    kpipe::validate(config);  // an optim.min_lr given above the lr chosen
    if (resume) config.checkpoint.resume = "latest";
    if (trace_full) config.output.trace_full = 1;
    if (command_line.exit_now) {
      rc = command_line.exit_code;
    } else {
      const auto placement = kpipe::runtime::place_rank(config.pipeline, MPI_COMM_WORLD);
      if (rank == 0 && !placement.note.empty()) fmt::print(stderr, "kpipe-train: note: {}\n", placement.note);
      config.pipeline.transport = kpipe::runtime::resolved_choice(placement.transport);
      kpipe::runtime::KokkosSession kokkos(placement);
      rc = config.train.precision == kpipe::Precision::bf16
               ? train<kpipe::bf16>(config, optimizer.note, placement.transport, rank, set_up)
               : train<float>(config, optimizer.note, placement.transport, rank, set_up);
    }
  } catch (const kpipe::InputError& e) {
    if (!set_up) {
      // Before training, every failure is agreed by all ranks (or the same everywhere); one says so.
      if (rank == 0) fmt::print(stderr, "kpipe-train: error: {}\n", e.what());
      rc = kpipe::exit_status(kpipe::ExitCode::bad_input);
    } else {
      // During training it may be this rank's alone: say where, and take the whole job down (no hang).
      kpipe::abort_job(kpipe::ExitCode::bad_input, fmt::format("kpipe-train: rank {}: error: {}", rank, e.what()));
    }
  } catch (const std::exception& e) {
    // Anything else may have struck one rank only: say where, and take the whole job down (no hang).
    kpipe::abort_job(kpipe::ExitCode::failure, fmt::format("kpipe-train: rank {}: error: {}", rank, e.what()));
  }
  {
    // MPI_Finalize waits for every rank: bounded like every other wait.
    const kpipe::comm::Watchdog watch(rank, {timeout, "MPI_Finalize"});
    MPI_Finalize();
  }
  return rc;
}
