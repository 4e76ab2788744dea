#pragma once
// Training with pipeline parallelism. Each rank builds only its own model chunks (the virtual stages the
// partition gives it) and walks its list of the lowered schedule every step: receives posted ahead,
// forward, stash, send onward; receive the gradient, backward, send it back, free the stash; then the
// optimizer step. With one rank the schedule is F0 B0 F1 B1 ...: the plain gradient-accumulation loop
// that every layout must match bit for bit (docs/architecture.md, property 1).
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/transport.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/runtime/async_rules.hpp"
#include "kpipe/runtime/action_clock.hpp"
#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

struct StepStats {
  std::int64_t step = 0;     // 0-based index of the optimizer step just taken
  double loss = 0;           // mean per-token loss of the mini-batch (all replicas)
  double lr = 0;
  double grad_norm = 0;      // global L2 norm before clipping
  double seconds = 0;        // wall time of the step on this rank
  double busy_seconds = 0;   // time this rank spent in F, B, I, W
  double pipeline_seconds = 0;  // time from the step's start to the end of its schedule (before the optimizer)
  double optimizer_seconds = 0; // the optimizer's update on this rank
  std::int64_t tokens = 0;   // tokens in the mini-batch (all replicas)
  bool skipped = false;      // loss or gradient not finite: no update, on every rank alike
};

// One action this rank ran in a step, with its wall-clock span (seconds since the step began).
struct TimedAction {
  schedule::Action action;
  double start = 0, end = 0;
  std::int64_t bytes = 0;  // moved by a send or receive
};

// Called after each compute action (F, B, I, W) with the chunk, its slot and the micro-batch, so that an
// observer (activation traces) can read the chunk's layer outputs and gradients while they exist.
using ActionObserver = std::function<void(const schedule::Action& action, int slot)>;

template <class T> class Buffers;
template <class T> class GradientReduction;
template <class T> class WeightVersions;

template <class T> class Trainer {
 public:
  // The schedule is generated (or read from pipeline.schedule_file), lowered, replicated across the
  // data-parallel replicas and validated here, and every rank's memory is planned and held against
  // memory.limit_per_rank, before any allocation; bad input throws InputError identically on every rank.
  Trainer(const Config& config, const data::Corpus& corpus, const comm::ProcessGrid& grid);
  ~Trainer();

  // One optimizer step on the next mini-batch. Asynchronous schedules: the next m micro-batches' share of
  // the lists (their forwards, the backwards and updates due in the step), without a flush.
  StepStats step();
  double evaluate();           // mean per-token loss over the validation windows (every rank gets it)
  std::int64_t next_step() const { return step_; }
  void set_next_step(std::int64_t step) { step_ = step; }  // resuming: the sampler and lr follow the step
  std::uint64_t param_checksum() const;  // every rank gets the whole model's checksum
  const model::ModelDesc& desc() const { return desc_; }
  const Config& config() const { return config_; }
  const data::Corpus& corpus() const { return *corpus_; }  // its tokenizer is what the model's ids mean
  const comm::ProcessGrid& grid() const { return grid_; }
  const schedule::Schedule& schedule() const { return schedule_; }  // this replica's, lowered
  // Stage-to-stage transfers on the pipeline communicator (what pipeline.transport chose), for work that
  // follows the same layout outside a step (generation).
  comm::Transport& transport() { return *transport_; }
  const schedule::Replicated& replicated() const { return replicated_; }  // every replica's
  const std::vector<schedule::Action>& actions() const { return actions_; }  // what this rank runs
  const schedule::BufferPlan& buffer_plan() const { return plan_; }
  // The micro-batch of the whole mini-batch that this replica's micro-batch `local` is.
  int global_microbatch(int local) const { return replicated_.global_microbatch(grid_.replica, local); }
  int message_buffers() const;  // spare [N, C] buffers allocated (memory/plan.hpp predicts it)
  int chunks() const { return int(chunks_.size()); }
  model::Chunk<T>& chunk(int c) { return *chunks_.at(c); }
  const model::Chunk<T>& chunk(int c) const { return *chunks_.at(c); }
  int peak_stash() const { return peak_stash_; }  // measured on this rank since construction
  // Asynchronous schedules: the most weight versions chunk `c` held at once (1 for synchronous ones), and
  // per micro-batch run here the version its forward and its backward read (the newest version is the
  // parameters between steps).
  int peak_versions(int chunk) const;
  struct VersionsRead {
    std::int64_t microbatch;
    int forward, backward;
  };
  const std::vector<VersionsRead>& versions_read() const { return versions_read_; }
  // Checkpoints of asynchronous runs (docs/checkpoint-format.md): at a step boundary chunk `c` holds, besides
  // the newest version (its parameters), the versions `older` = 1 .. older_versions(c) updates before it
  // that the micro-batches in flight read (schedule::versions_bound() - 1 of them; early in a run, before
  // that many updates, the initial weights stand for the missing ones, as the rule's max(0, ...) says).
  bool asynchronous() const { return asynchronous_; }
  int older_versions(int chunk) const;
  // Host copy of the version `older` updates back; empty when no micro-batch in flight reads it (near the
  // run's end, when fewer micro-batches remain than the pipeline holds).
  std::vector<T> older_version(int chunk, int older) const;
  // Resuming at step boundary `step` (set_next_step first) from the parameters loaded as the newest version
  // and older[c][j - 1] = version j updates back (none: a drained run's checkpoint, every micro-batch reads
  // the newest version until the updates of the resumed run; it continues as a new asynchronous run would)
  // : the remaining steps run the validated `resumed` lists,
  // which forward again the micro-batches in flight on the versions they read, so the run continues bit for
  // bit as the uninterrupted one.
  void resume_asynchronous(const std::vector<std::vector<std::vector<T>>>& older);
  // Whether step `step` is one of the run's steady state (asynchronous schedules: past the warm-up, before
  // the last step's drain, when the run has such steps; synchronous ones: every step), for the figures
  // that compare with the simulator's steady state.
  bool steady_step(std::int64_t step) const;
  // Mean seconds of one F, B, I, W on chunk `chunk` of this rank (index by Op), over the steps after the
  // first; 0 for kinds that did not run.
  std::array<double, 4> mean_action_seconds(int chunk) const;
  // Every action of the last step on this rank, in the order run.
  const std::vector<TimedAction>& last_timeline() const { return timeline_; }
  // Profiling (output.profile): while on, every layer's work is fenced and timed (chunk.hpp).
  void profile_layers(bool on);
  // Mean seconds per call of this rank's layers, by global layer index (zeros for others' layers): forward,
  // backward_input, backward_weight, recompute.
  std::vector<std::array<double, 4>> layer_seconds() const;
  void set_observer(ActionObserver observer) { observer_ = std::move(observer); }

 private:
  struct StepState;
  StepStats async_step();
  schedule::Action action_at(const StepState& st, std::size_t index) const;  // shifted to the step run
  void bind_newest() const;    // asynchronous: the parameters hold the newest version (evaluation, checksum)
  bool version_needed(int chunk, int version) const;  // a micro-batch in flight or to come reads it
  void run_action(StepState& st, std::size_t index);
  void post_receive(StepState& st, std::size_t index);
  void wait_receive(StepState& st, std::size_t index);
  void stage_tokens(std::int64_t step);
  void stage_async_tokens(const StepState& st, std::size_t begin, std::size_t end);
  void load_tokens(int chunk, int slot, int staging_row);
  void read_action_times(StepState& st);
  void optimizer_step(StepStats& stats);
  [[noreturn]] void timeout(const schedule::Action& a, std::size_t index) const;

  Config config_;
  const data::Corpus* corpus_;
  comm::ProcessGrid grid_;
  model::ModelDesc desc_;
  schedule::Replicated replicated_;  // every replica's lowered, validated lists
  schedule::Schedule schedule_;      // this replica's
  std::vector<schedule::Action> actions_;  // this rank's list: what it runs, in order
  schedule::BufferPlan plan_;              // where receives are posted, slots retired, sends delivered
  std::vector<std::unique_ptr<model::Chunk<T>>> chunks_;
  std::unique_ptr<Buffers<T>> buffers_;
  std::unique_ptr<GradientReduction<T>> reduction_;
  std::unique_ptr<comm::Transport> transport_;  // along the pipeline
  // Asynchronous schedules: their rules, the lists' steps, the versions per chunk, what is in flight.
  bool asynchronous_ = false;
  AsyncRules rules_;
  int template_step_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> step_ranges_;
  std::vector<std::unique_ptr<WeightVersions<T>>> versions_;
  std::vector<std::map<std::int64_t, int>> in_flight_;  // per chunk: micro-batch -> version its forward read
  std::vector<std::int64_t> next_forward_;               // per chunk: the next micro-batch to forward
  std::vector<VersionsRead> versions_read_;
  // A resumed asynchronous run: its first step, and what its lists' micro-batches and versions (numbered
  // from the resume) are offset by to be the run's.
  std::int64_t resume_step_ = 0, base_microbatch_ = 0;
  int base_version_ = 0;
  ExecSpace space_;
  std::int64_t step_ = 0;
  int local_microbatches_;       // per replica
  int staging_rows_ = 0;         // host rows of tokens staged per step
  int sequences_per_microbatch_;
  int stash_ = 0, peak_stash_ = 0;
  std::vector<std::array<double, 4>> action_seconds_;  // [chunk] F, B, I, W, summed over the steps after the first
  std::vector<std::array<long, 4>> action_count_;
  std::vector<std::vector<typename model::Chunk<T>::LayerTimes>> layer_times_;  // per chunk, while profiling
  std::vector<TimedAction> timeline_;
  ActionObserver observer_;
  double test_stall_seconds_ = 0;  // test hook KPIPE_TEST_STALL="rank:seconds": that rank sleeps before step 0
  // Tokens of every micro-batch of a step ([micro-batch, row]), filled at the step's start and copied to the
  // device as each F needs them: no copy waits for the stream, and the next step refills them after the
  // step's final fence.
  Kokkos::View<Token**, Kokkos::LayoutRight, PinnedSpace> host_inputs_, host_targets_;
  ActionClock clock_;
  Kokkos::View<double*, MemSpace> loss_sums_;  // per global micro-batch, on the device until the step's end
};

// Per-layer sums of squared gradients of a store, in global layer order.
template <class T> std::vector<double> layer_grad_squares(const ExecSpace& space, const model::ParameterStore<T>& store);

}  // namespace kpipe::runtime
