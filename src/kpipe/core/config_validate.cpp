#include <fmt/format.h>

#include <cmath>

#include "kpipe/core/bytes.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/config_keys.hpp"
#include "kpipe/core/error.hpp"

// Cross-field checks of a whole configuration, after every source of keys is applied.
namespace kpipe {

using config_table::format_double;

namespace {

void at_least(const char* key, std::int64_t value, std::int64_t minimum) {
  require(value >= minimum, "{} = {}: expected an integer >= {}", key, value, minimum);
}

void non_negative(const char* key, double value) {
  require(value >= 0 && std::isfinite(value), "{} = {}: expected a number >= 0", key, format_double(value));
}

void positive(const char* key, double value) {
  require(value > 0 && std::isfinite(value), "{} = {}: expected a positive number", key, format_double(value));
}

// value in [low, high) (or [low, high] when the high end is closed); NaN fails every comparison.
void in_range(const char* key, double value, double low, bool low_open, double high, bool high_closed) {
  const bool above = low_open ? value > low : value >= low;
  const bool below = high_closed ? value <= high : value < high;
  require(above && below, "{} = {}: expected a number in {}{}, {}{}", key, format_double(value), low_open ? "(" : "[",
          format_double(low), format_double(high), high_closed ? "]" : ")");
}

}  // namespace

void validate(const Config& config) {
  const ModelConfig& model = config.model;
  at_least("model.vocab", model.vocab, 256);
  at_least("model.seq_len", model.seq_len, ModelConfig::min_seq_len);
  at_least("model.d_model", model.d_model, 1);
  at_least("model.n_layers", model.n_layers, 1);
  at_least("model.n_heads", model.n_heads, 1);
  at_least("model.mlp_ratio", model.mlp_ratio, 1);
  require(model.d_model % model.n_heads == 0, "model.d_model = {} is not divisible by model.n_heads = {}",
          model.d_model, model.n_heads);
  positive("model.init_std", model.init_std);
  positive("model.ln_eps", model.ln_eps);

  const TrainConfig& train = config.train;
  at_least("train.steps", train.steps, 1);
  at_least("train.batch", train.batch, 1);
  at_least("train.microbatches", train.microbatches, 1);
  at_least("train.log_every", train.log_every, 1);
  at_least("train.eval_every", train.eval_every, 0);
  at_least("train.eval_batches", train.eval_batches, 1);
  at_least("train.max_skipped_steps", train.max_skipped_steps, 0);
  require(train.batch % train.microbatches == 0, "train.batch = {} is not divisible by train.microbatches = {}",
          train.batch, train.microbatches);

  const OptimizerConfig& optim = config.optim;
  positive("optim.lr", optim.lr);
  in_range("optim.min_lr", optim.min_lr, 0, false, optim.lr, true);
  at_least("optim.warmup_steps", optim.warmup_steps, 0);
  at_least("optim.decay_steps", optim.decay_steps, 0);
  in_range("optim.beta1", optim.beta1, 0, false, 1, false);
  in_range("optim.beta2", optim.beta2, 0, false, 1, false);
  positive("optim.eps", optim.eps);
  in_range("optim.momentum", optim.momentum, 0, false, 1, false);
  non_negative("optim.weight_decay", optim.weight_decay);
  require(!std::isnan(optim.grad_clip), "optim.grad_clip = nan: expected a number");

  const DataConfig& data = config.data;
  in_range("data.val_fraction", data.val_fraction, 0, true, 1, false);
  at_least("data.synthetic_tokens", data.synthetic_tokens, 1);

  at_least("output.trace_every", config.output.trace_every, 1);
  at_least("check.replicas_every", config.check.replicas_every, 0);
  at_least("check.recompute_every", config.check.recompute_every, 0);
  require(config.output.trace_full == 0 || config.output.trace_full == 1, "output.trace_full = {}: expected 0 or 1",
          config.output.trace_full);

  const PipelineConfig& pipeline = config.pipeline;
  at_least("pipeline.pipeline_size", pipeline.pipeline_size, 1);
  at_least("pipeline.data_parallel", pipeline.data_parallel, 1);
  at_least("pipeline.chunks", pipeline.chunks, 1);
  at_least("pipeline.threads_per_rank", pipeline.threads_per_rank, 0);
  at_least("pipeline.dp_reduction_group", pipeline.dp_reduction_group, 1);
  require(config.memory.limit_per_rank == "auto" || config.memory.limit_per_rank == "none" ||
              parse_bytes(config.memory.limit_per_rank).has_value(),
          "memory.limit_per_rank = '{}': expected auto, none or a size such as 6GiB, 512MiB, 2e9",
          config.memory.limit_per_rank);
  // Far beyond any batch job's time limit: "wait forever" in practice, and no overflow (comm/deadline.hpp).
  require(pipeline.recv_timeout_s > 0 && pipeline.recv_timeout_s <= max_timeout_s,
          "pipeline.recv_timeout_s = {}: expected seconds in (0, {:g}] ({:g} s, about 11.6 days, is the longest "
          "wait: no limit in practice)",
          format_double(pipeline.recv_timeout_s), max_timeout_s, max_timeout_s);
  require(pipeline.vertical_sync == 0 || pipeline.vertical_sync == 1, "pipeline.vertical_sync = {}: expected 0 or 1",
          pipeline.vertical_sync);
  require(pipeline.vertical_sync == 0 || pipeline.schedule == ScheduleKind::pipedream,
          "pipeline.vertical_sync = 1 needs pipeline.schedule = \"pipedream\" (got \"{}\")", pipeline.schedule);
  require(pipeline.chunks == 1 || pipeline.schedule == ScheduleKind::interleaved || pipeline.schedule == ScheduleKind::zb_v ||
              !pipeline.schedule_file.empty(),
          "pipeline.chunks = {} needs pipeline.schedule = \"interleaved\" or \"zb-v\" (got \"{}\")",
          pipeline.chunks, pipeline.schedule);
  // The mini-batch's micro-batches are shared out among the replicas, the same number to each.
  require(train.microbatches % pipeline.data_parallel == 0,
          "train.microbatches = {} is not divisible by pipeline.data_parallel = {}", train.microbatches,
          pipeline.data_parallel);
  // The ordered reduction hands each replica whole groups of micro-batches.
  if (pipeline.dp_reduction == DpReduction::ordered && pipeline.data_parallel > 1) {
    const int per_replica = train.microbatches / pipeline.data_parallel;
    require(per_replica % pipeline.dp_reduction_group == 0,
            "pipeline.dp_reduction_group = {} does not divide the {} micro-batches per replica (train.microbatches = "
            "{} / pipeline.data_parallel = {})",
            pipeline.dp_reduction_group, per_replica, train.microbatches, pipeline.data_parallel);
  }
  // The model's layers are the embedding, the blocks and the head; every model chunk needs one at least.
  const std::int64_t model_chunks = static_cast<std::int64_t>(pipeline.pipeline_size) * pipeline.chunks;
  require(model_chunks <= model.n_layers + 2,
          "pipeline.pipeline_size * pipeline.chunks = {} * {} model chunks exceed the model.n_layers + 2 = {} layers",
          pipeline.pipeline_size, pipeline.chunks, model.n_layers + 2);
}

}  // namespace kpipe
