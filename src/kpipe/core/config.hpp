#pragma once
// The run configuration: plain data, one struct per TOML table ([model], [train], [optim], [data],
// [pipeline], [memory], [output], [checkpoint], [check]). Every field is a key, settable in the TOML file and on the command line as
// --table.key (see core/config_io.hpp). Defaults here are the "tiny" preset's.
#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kpipe {

// The enumerated keys. Each enum's values are named, in order, once: in its EnumText specialization below,
// which the key table (core/config_keys.cpp), --help, the TOML dump and every message read.
enum class OptimizerKind : std::uint8_t { adamw, sgd };
enum class ScheduleKind : std::uint8_t { naive, gpipe, one_f_one_b, interleaved, zb_h1, zb_v, pipedream, two_bw };
enum class PartitionKind : std::uint8_t { uniform, balanced };
enum class DpReduction : std::uint8_t { ordered, allreduce };
enum class TransportChoice : std::uint8_t { automatic, mpi, nccl };
// Which block activations are dropped after the forward and computed again before backward (nn/block.hpp).
enum class Recompute : std::uint8_t { none, attention, mlp, block };
enum class CheckpointFallback : std::uint8_t { error, previous };
enum class CheckpointFailure : std::uint8_t { stop, keep_training };
enum class OtherRuns : std::uint8_t { refuse, keep };
// Whether checkpoints are written beside the training (a snapshot, then a thread of its own) or while it waits.
enum class CheckpointAsync : std::uint8_t { off, on, automatic };
// What the matrix products compute in and the activations are stored in (docs/gpu.md, "Precision"): fp32
// everywhere; fp32 storage with TF32 tensor-core products (CUDA builds); bf16 mixed precision (fp32 master
// weights, optimizer state, reductions and loss; bf16 activations, messages and products' operands).
enum class Precision : std::uint8_t { fp32, tf32, bf16 };

template <class E> struct EnumText;
template <> struct EnumText<OptimizerKind> {
  static constexpr std::array<std::string_view, 2> names{"adamw", "sgd"};
};
template <> struct EnumText<ScheduleKind> {
  static constexpr std::array<std::string_view, 8> names{"naive", "gpipe",     "1f1b",      "interleaved",
                                                          "zb-h1", "zb-v",      "pipedream", "2bw"};
};
template <> struct EnumText<PartitionKind> {
  static constexpr std::array<std::string_view, 2> names{"uniform", "balanced"};
};
template <> struct EnumText<DpReduction> {
  static constexpr std::array<std::string_view, 2> names{"ordered", "allreduce"};
};
template <> struct EnumText<TransportChoice> {
  static constexpr std::array<std::string_view, 3> names{"auto", "mpi", "nccl"};
};
template <> struct EnumText<Recompute> {
  static constexpr std::array<std::string_view, 4> names{"none", "attention", "mlp", "block"};
};
template <> struct EnumText<CheckpointFallback> {
  static constexpr std::array<std::string_view, 2> names{"error", "previous"};
};
template <> struct EnumText<CheckpointFailure> {
  static constexpr std::array<std::string_view, 2> names{"stop", "continue"};
};
template <> struct EnumText<OtherRuns> {
  static constexpr std::array<std::string_view, 2> names{"refuse", "keep"};
};
template <> struct EnumText<CheckpointAsync> {
  static constexpr std::array<std::string_view, 3> names{"off", "on", "auto"};
};
template <> struct EnumText<Precision> {
  static constexpr std::array<std::string_view, 3> names{"fp32", "tf32", "bf16"};
};

// The name of an enumerated value as the configuration spells it ("1f1b", "auto").
template <class E, class = decltype(EnumText<E>::names)> constexpr std::string_view to_string(E value) {
  return EnumText<E>::names[std::size_t(value)];
}
// The value a name spells, if any.
template <class E> constexpr std::optional<E> enum_from_string(std::string_view text) {
  for (std::size_t i = 0; i < EnumText<E>::names.size(); ++i)
    if (EnumText<E>::names[i] == text) return E(i);
  return std::nullopt;
}

}  // namespace kpipe

// Messages name an enumerated value as the configuration spells it.
template <class E>
struct fmt::formatter<E, char, std::void_t<decltype(kpipe::EnumText<E>::names)>> : fmt::formatter<std::string_view> {
  template <class Context> auto format(E value, Context& context) const {
    return fmt::formatter<std::string_view>::format(kpipe::to_string(value), context);
  }
};

namespace kpipe {

// The value a name spells, for code that holds names (tools' own options, tests); std::invalid_argument if none.
template <class E> E enum_value(std::string_view text) {
  if (const auto value = enum_from_string<E>(text)) return *value;
  throw std::invalid_argument(fmt::format("'{}' names no value of this enumeration", text));
}

// Bytes of one stored activation (and of one element of a pipeline message) at a precision: bf16's 2, else 4.
constexpr int activation_bytes(Precision precision) { return precision == Precision::bf16 ? 2 : 4; }

// The asynchronous schedules (no flush: PipeDream, PipeDream-2BW).
constexpr bool is_asynchronous(ScheduleKind schedule) {
  return schedule == ScheduleKind::pipedream || schedule == ScheduleKind::two_bw;
}

struct ModelConfig {
  static constexpr int min_seq_len = 2;  // a window of seq_len + 1 tokens holds at least two predictions
  int vocab = 256;        // bytes; kpipe-train raises it to the data's vocabulary (data::fit_vocabulary)
  int seq_len = 64;       // tokens per training window (and the size of the position table)
  int d_model = 64;
  int n_layers = 2;       // transformer blocks
  int n_heads = 4;
  int mlp_ratio = 4;      // hidden width of the MLP = mlp_ratio * d_model
  double init_std = 0.02; // std of normal weight init; residual projections get init_std / sqrt(2 n_layers)
  double ln_eps = 1e-5;
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;            // peak learning rate
  double min_lr = 1e-4;        // floor of the cosine decay
  int warmup_steps = 10;       // linear warm-up to lr over this many steps
  int decay_steps = 0;         // cosine from lr down to min_lr over this many steps after warm-up (0: to the end)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;  // AdamW
  double momentum = 0.9;                          // SGD
  double weight_decay = 0.1;   // AdamW: decoupled; SGD: L2 added to the gradient; 2-D weights only
  double grad_clip = 1.0;      // bound on the global gradient L2 norm; <= 0 disables clipping
};

struct TrainConfig {
  int steps = 100;            // optimizer steps
  int batch = 8;              // sequences per mini-batch (per optimizer step)
  int microbatches = 1;       // the mini-batch is split into this many micro-batches
  std::uint64_t seed = 1234;  // initialization and data sampling
  int log_every = 10;         // progress line on stderr every this many steps
  int eval_every = 0;         // validation loss every this many steps (0: only at the end)
  int eval_batches = 8;       // mini-batches of validation windows per evaluation
  int max_skipped_steps = 3;  // stop (exit code 4) after this many non-finite steps in a row; 0: never
  Precision precision = Precision::fp32;
};

struct DataConfig {
  std::string path;             // HDF5 token file or text file; empty: the embedded synthetic corpus
  double val_fraction = 0.1;    // share of a text file (or of the synthetic corpus) held out for validation
  std::int64_t synthetic_tokens = 1 << 20;  // size of the synthetic corpus
};

// The longest timeout kpipe accepts, in seconds (about 11.6 days: longer than any batch job, so "no limit" in
// practice); converted to the steady clock's nanoseconds it is far from overflowing (comm/deadline.hpp).
inline constexpr double max_timeout_s = 1e6;

struct PipelineConfig {
  int pipeline_size = 1;        // stages (ranks per pipeline)
  int data_parallel = 1;        // pipeline replicas
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int vertical_sync = 0;        // pipedream: 1, a micro-batch reads on every stage the version stage 0 read
  int chunks = 1;               // model chunks per rank (interleaved: any; zb-v: 2)
  std::string schedule_file;    // a hand-written schedule (text form) instead of a generated one
  PartitionKind partition = PartitionKind::uniform;
  double recv_timeout_s = 300;  // a wait longer than this aborts the run with a message; (0, max_timeout_s]
  // How replicas combine gradients. "ordered": the micro-batches go to the replicas in round-robin groups of
  // dp_reduction_group, and the running sum of the weight gradients travels from replica to replica once per
  // group, so every micro-batch's gradient is added in global micro-batch order, bit for bit as on one rank
  // (docs/architecture.md, property 1), with each replica's weight-gradient work where its schedule puts it
  // (schedule/reduction.hpp). "allreduce": MPI_Allreduce of each replica's sum; faster, equal to one rank's
  // up to rounding.
  DpReduction dp_reduction = DpReduction::ordered;
  int dp_reduction_group = 1;   // "ordered": consecutive micro-batches per hop of the running sum
  // How stages and replicas exchange data: "nccl" (GPU buffers through NCCL, on the compute stream), "mpi"
  // (MPI; device buffers through pinned host copies unless MPI is CUDA-aware), or "auto": NCCL when kpipe is
  // built with CUDA and NCCL and every rank of a node has a GPU of its own, MPI otherwise (comm/transport.hpp).
  TransportChoice transport = TransportChoice::automatic;
  // Host threads of each rank's Kokkos (OpenMP backend); 0 leaves it to Kokkos and OMP_NUM_THREADS.
  int threads_per_rank = 0;
};

// Memory: activation recomputation and the per-rank limit (memory/plan.hpp, docs/user-guide.md).
struct MemoryConfig {
  Recompute recompute = Recompute::none;
  // Most bytes a rank may need (the memory plan's prediction); "auto": the memory available on the node
  // (on GPUs, on the device) shared by the ranks there; "none": no limit; or a size such as "6GiB".
  std::string limit_per_rank = "auto";
};

struct OutputConfig {
  std::string metrics;  // JSON Lines file; empty: none
  // Activation trace and timeline (io/trace.hpp, io/timeline.hpp, docs/traces.md).
  std::string trace;                // activation trace HDF5 file; empty: none
  int trace_every = 1;              // trace the steps that are multiples of this
  std::string trace_layers = "all"; // indices, ranges, or globs on layer paths ("1,3-4,layers/0*")
  int trace_full = 0;               // 1: also the full tensors of micro-batch 0
  std::string timeline;             // HDF5 file of every action each rank ran, every step; empty: none
  std::string profile;              // layer profile (planner/profile.hpp) for kpipe-sim recommend; empty: none
};

// Checkpoints (io/checkpoint.hpp, docs/checkpoint-format.md).
struct CheckpointConfig {
  std::string dir;                // where step-<N>.h5 files and `latest` live; empty: no checkpoints
  int every = 0;                  // write one every this many steps (0: only at a stop signal)
  int keep = 3;                   // newest complete checkpoints of this run kept (at least 2)
  std::string resume;             // "" (start fresh), "latest" (in dir), or a checkpoint file
  std::string init_from;          // a checkpoint whose weights (model, tokenizer) a fresh run starts from; "": none
  CheckpointFallback fallback = CheckpointFallback::error;  // a corrupt checkpoint: exit 2, or load the one before
  CheckpointFailure on_failure = CheckpointFailure::stop;  // a checkpoint not written: exit code 5, or train on
  OtherRuns other_runs = OtherRuns::refuse;  // dir holds another run's checkpoints: refuse to start, or keep them
  // Written beside the training from a snapshot (on), while it waits (off), or on where it can run (auto).
  CheckpointAsync async = CheckpointAsync::automatic;
};

// Checks for silent data corruption (runtime/replica_check.hpp, runtime/recompute_check.hpp): a fault that
// changes bits without an error ends the run with exit code 6 before anything of it is checkpointed.
struct CheckConfig {
  int replicas_every = 10;  // compare the replicas' weights and optimizer state every this many steps (0: at checkpoints only)
  int recompute_every = 0;  // run one micro-batch's forward twice per rank every this many steps (0: never)
};

struct Config {
  ModelConfig model;
  TrainConfig train;
  OptimizerConfig optim;
  DataConfig data;
  PipelineConfig pipeline;
  MemoryConfig memory;
  OutputConfig output;
  CheckpointConfig checkpoint;
  CheckConfig check;
};

}  // namespace kpipe
