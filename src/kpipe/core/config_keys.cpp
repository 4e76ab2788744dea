#include "kpipe/core/config_keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"

namespace kpipe {
namespace config_table {

namespace {

template <class Section, class T>
Key entry(std::string name, Section Config::*section, T Section::*member, std::string help, std::string alias = {}) {
  std::vector<std::string> choices;
  if constexpr (std::is_enum_v<T>)
    for (const std::string_view choice : EnumText<T>::names) choices.emplace_back(choice);
  return {std::move(name), std::move(alias), std::move(help), std::move(choices),
          [section, member](Config& config) -> FieldRef {
            T* field = &((config.*section).*member);
            if constexpr (std::is_enum_v<T>)
              return EnumRef{[field] { return to_string(*field); },
                             [field](std::string_view text) { *field = *enum_from_string<T>(text); }};
            else
              return field;
          }};
}

}  // namespace

// The one table of keys: every field of Config, in the order to_toml writes them.
const std::vector<Key>& keys() {
  using C = Config;
  using M = ModelConfig;
  using T = TrainConfig;
  using O = OptimizerConfig;
  using D = DataConfig;
  using P = PipelineConfig;
  static const std::vector<Key> table = {
      entry("model.vocab", &C::model, &M::vocab, "vocabulary size: at least 256, raised to the data's (a BPE token file's)"),
      entry("model.seq_len", &C::model, &M::seq_len, "tokens per training window (at least 2)"),
      entry("model.d_model", &C::model, &M::d_model, "width of the residual stream"),
      entry("model.n_layers", &C::model, &M::n_layers, "transformer blocks"),
      entry("model.n_heads", &C::model, &M::n_heads, "attention heads (must divide model.d_model)"),
      entry("model.mlp_ratio", &C::model, &M::mlp_ratio, "MLP hidden width = mlp_ratio * d_model"),
      entry("model.init_std", &C::model, &M::init_std, "std of the normal weight initialization"),
      entry("model.ln_eps", &C::model, &M::ln_eps, "LayerNorm epsilon"),
      entry("train.steps", &C::train, &T::steps, "optimizer steps", "--steps"),
      entry("train.batch", &C::train, &T::batch, "sequences per mini-batch (per optimizer step, all replicas)",
           "--batch"),
      entry("train.microbatches", &C::train, &T::microbatches, "micro-batches per mini-batch (shared out among the replicas)",
           "--microbatches"),
      entry("train.seed", &C::train, &T::seed, "seed of initialization and data sampling", "--seed"),
      entry("train.log_every", &C::train, &T::log_every, "progress line every this many steps"),
      entry("train.eval_every", &C::train, &T::eval_every, "validation loss every this many steps (0: at the end)"),
      entry("train.eval_batches", &C::train, &T::eval_batches, "mini-batches of validation windows per evaluation"),
      entry("train.max_skipped_steps", &C::train, &T::max_skipped_steps,
            "stop with exit code 4 after this many non-finite steps in a row (0: never)"),
      entry("train.precision", &C::train, &T::precision,
            "fp32; tf32 (TF32 tensor-core products, CUDA builds); bf16 (mixed: fp32 master weights, bf16 activations)",
            "--precision"),
      entry("optim.kind", &C::optim, &O::kind, "optimizer"),
      entry("optim.lr", &C::optim, &O::lr, "peak learning rate", "--lr"),
      entry("optim.min_lr", &C::optim, &O::min_lr, "floor of the cosine decay"),
      entry("optim.warmup_steps", &C::optim, &O::warmup_steps, "linear warm-up steps"),
      entry("optim.decay_steps", &C::optim, &O::decay_steps, "cosine decay steps after warm-up (0: to the end)"),
      entry("optim.beta1", &C::optim, &O::beta1, "AdamW first-moment decay"),
      entry("optim.beta2", &C::optim, &O::beta2, "AdamW second-moment decay"),
      entry("optim.eps", &C::optim, &O::eps, "AdamW denominator epsilon"),
      entry("optim.momentum", &C::optim, &O::momentum, "SGD momentum"),
      entry("optim.weight_decay", &C::optim, &O::weight_decay, "weight decay of 2-D weights"),
      entry("optim.grad_clip", &C::optim, &O::grad_clip, "bound on the global gradient L2 norm (<= 0: none)"),
      entry("data.path", &C::data, &D::path,
           "HDF5 token file (kpipe-prepare) or text file; empty: the embedded synthetic corpus", "--data"),
      entry("data.val_fraction", &C::data, &D::val_fraction, "share of a text or synthetic corpus held out"),
      entry("data.synthetic_tokens", &C::data, &D::synthetic_tokens, "size of the synthetic corpus in tokens"),
      entry("pipeline.pipeline_size", &C::pipeline, &P::pipeline_size, "stages (ranks per pipeline)",
           "--pipeline-size"),
      entry("pipeline.data_parallel", &C::pipeline, &P::data_parallel, "pipeline replicas", "--data-parallel"),
      entry("pipeline.schedule", &C::pipeline, &P::schedule, "pipeline schedule", "--schedule"),
      entry("pipeline.vertical_sync", &C::pipeline, &P::vertical_sync,
            "pipedream: 1, every stage reads for a micro-batch the weight version stage 0 read (vertical sync)",
            "--vertical-sync"),
      entry("pipeline.chunks", &C::pipeline, &P::chunks, "model chunks per rank (interleaved; zb-v takes 2)",
            "--chunks"),
      entry("pipeline.schedule_file", &C::pipeline, &P::schedule_file,
           "a hand-written schedule (text form) instead of a generated one", "--schedule-file"),
      entry("pipeline.partition", &C::pipeline, &P::partition, "layers to stages"),
      entry("pipeline.dp_reduction", &C::pipeline, &P::dp_reduction,
            "replicas' gradients: ordered (bit-identical to one rank) or allreduce (faster)"),
      entry("pipeline.dp_reduction_group", &C::pipeline, &P::dp_reduction_group,
            "ordered reduction: consecutive micro-batches per hop of the running gradient sum (divides the "
            "micro-batches per replica)"),
      entry("pipeline.recv_timeout_s", &C::pipeline, &P::recv_timeout_s,
           "a receive, send or collective waiting longer than this many seconds (at most 1e6) aborts the run"),
      entry("pipeline.transport", &C::pipeline, &P::transport,
            "stage-to-stage and replica transfers: auto (NCCL on GPUs when built with it), mpi or nccl",
            "--transport"),
      entry("pipeline.threads_per_rank", &C::pipeline, &P::threads_per_rank,
            "host threads per rank (Kokkos OpenMP backend); 0: Kokkos' choice (OMP_NUM_THREADS)",
            "--threads-per-rank"),
      entry("memory.recompute", &C::memory, &MemoryConfig::recompute,
            "activations recomputed before backward instead of kept", "--recompute"),
      entry("memory.limit_per_rank", &C::memory, &MemoryConfig::limit_per_rank,
            "most memory a rank may need: auto (the node's available memory / its ranks), none, or a size (6GiB)",
            "--memory-limit-per-rank"),
      entry("output.metrics", &C::output, &OutputConfig::metrics, "JSON Lines metrics file (empty: none)",
           "--metrics"),
      entry("output.trace", &C::output, &OutputConfig::trace, "activation trace HDF5 file (empty: none)", "--trace"),
      entry("output.trace_every", &C::output, &OutputConfig::trace_every, "trace every this many steps",
            "--trace-every"),
      entry("output.trace_layers", &C::output, &OutputConfig::trace_layers,
            "layers traced: all, indices, ranges, globs on paths (\"1,3-4,layers/0*\")", "--trace-layers"),
      entry("output.trace_full", &C::output, &OutputConfig::trace_full,
            "1: also trace the full tensors of micro-batch 0 (see --trace-full)"),
      entry("output.timeline", &C::output, &OutputConfig::timeline,
            "HDF5 file of every action each rank ran, every step (empty: none)", "--timeline"),
      entry("output.profile", &C::output, &OutputConfig::profile,
            "file of measured per-layer times for kpipe-sim recommend --profile (empty: none)"),
      entry("checkpoint.dir", &C::checkpoint, &CheckpointConfig::dir,
            "directory of step-<N>.h5 checkpoints and `latest` (empty: none)", "--checkpoint-dir"),
      entry("checkpoint.every", &C::checkpoint, &CheckpointConfig::every,
            "checkpoint every this many steps (0: only on SIGUSR1/SIGTERM)", "--checkpoint-every"),
      entry("checkpoint.keep", &C::checkpoint, &CheckpointConfig::keep,
            "newest complete checkpoints of this run kept (>= 2)", "--keep"),
      entry("checkpoint.resume", &C::checkpoint, &CheckpointConfig::resume,
            "resume from: latest (in checkpoint.dir) or a checkpoint file (empty: start fresh)"),
      entry("checkpoint.init_from", &C::checkpoint, &CheckpointConfig::init_from,
            "start from this checkpoint's weights, model and tokenizer with a fresh optimizer at step 0 (a checkpoint "
            "of any layout, or kpipe-import's); a checkpoint to resume from wins",
            "--init-from"),
      entry("checkpoint.fallback", &C::checkpoint, &CheckpointConfig::fallback,
            "a corrupt checkpoint: error (exit 2) or load the previous complete one", "--fallback"),
      entry("checkpoint.on_failure", &C::checkpoint, &CheckpointConfig::on_failure,
            "a checkpoint that cannot be written: stop (exit code 5) or continue training", "--on-checkpoint-failure"),
      entry("checkpoint.other_runs", &C::checkpoint, &CheckpointConfig::other_runs,
            "checkpoint.dir holds another run's checkpoints: refuse to start, or keep them and write beside them"),
      entry("checkpoint.async", &C::checkpoint, &CheckpointConfig::async,
            "write checkpoints beside the training from a snapshot: on, off, or auto (on where it can run)"),
      entry("check.replicas_every", &C::check, &CheckConfig::replicas_every,
            "compare the data-parallel replicas' weights and optimizer state every this many steps, the last step's "
            "and every checkpoint's too (0: at checkpoints only); replicas that differ stop the run (exit code 6)"),
      entry("check.recompute_every", &C::check, &CheckConfig::recompute_every,
            "every this many steps each rank runs one micro-batch's forward twice and compares the bytes (0: "
            "never); a difference stops the run (exit code 6)"),
  };
  return table;
}

const Key* find_key(const std::string& name) {
  for (const Key& key : keys())
    if (key.name == name) return &key;
  return nullptr;
}

std::vector<std::string> table_names() {
  std::vector<std::string> names;
  for (const Key& key : keys())
    if (std::find(names.begin(), names.end(), key.table()) == names.end()) names.push_back(key.table());
  return names;
}

std::string keys_of_table(const std::string& table) {
  std::vector<std::string> names;
  for (const Key& key : keys())
    if (key.table() == table) names.push_back(key.leaf());
  return join(names, ", ");
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace config_table

std::vector<std::string> config_keys() {
  std::vector<std::string> names;
  for (const config_table::Key& key : config_table::keys()) names.push_back(key.name);
  return names;
}

std::vector<std::string> preset_names() { return {"tiny", "small", "bench"}; }

Config preset(const std::string& name) {
  Config config;  // the struct defaults are the tiny preset
  if (name == "tiny") return config;
  if (name == "small") {
    config.model.seq_len = 128;
    config.model.d_model = 128;
    config.model.n_layers = 4;
    config.model.n_heads = 4;
    config.train.batch = 16;
    config.train.steps = 300;
    config.optim.lr = 2e-3;
    config.optim.warmup_steps = 20;
    return config;
  }
  if (name == "bench") {
    config.model.n_layers = 8;
    config.model.d_model = 256;
    config.model.n_heads = 8;
    config.model.seq_len = 128;
    config.train.batch = 16;
    return config;
  }
  throw InputError(fmt::format("--preset = {}: expected one of {}", name, config_table::join(preset_names(), ", ")));
}

}  // namespace kpipe
