#include "kpipe/core/config_io.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>
#include <variant>

#include "kpipe/core/bytes.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe {
namespace {

// An enumerated key's field, read and written through its names (EnumText).
struct EnumRef {
  std::function<std::string_view()> get;
  std::function<void(std::string_view)> set;  // one of the key's choices
};

// Where a key's value lives inside a Config.
using FieldRef = std::variant<int*, std::int64_t*, std::uint64_t*, double*, std::string*, EnumRef>;

struct Key {
  std::string name;                  // "table.key"
  std::string alias;                 // a short command-line spelling ("--steps"), or empty
  std::string help;
  std::vector<std::string> choices;  // the allowed values of an enumerated key (its EnumText names)
  std::function<FieldRef(Config&)> field;

  std::string table() const { return name.substr(0, name.find('.')); }
  std::string leaf() const { return name.substr(name.find('.') + 1); }
};

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
           "a receive waiting longer than this many seconds aborts the run"),
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
            "file of measured per-layer times for kpipe-sim --recommend --profile (empty: none)"),
      entry("checkpoint.dir", &C::checkpoint, &CheckpointConfig::dir,
            "directory of step-<N>.h5 checkpoints and `latest` (empty: none)", "--checkpoint-dir"),
      entry("checkpoint.every", &C::checkpoint, &CheckpointConfig::every,
            "checkpoint every this many steps (0: only on SIGUSR1/SIGTERM)", "--checkpoint-every"),
      entry("checkpoint.keep", &C::checkpoint, &CheckpointConfig::keep,
            "newest complete checkpoints of this run kept (>= 2)", "--keep"),
      entry("checkpoint.resume", &C::checkpoint, &CheckpointConfig::resume,
            "resume from: latest (in checkpoint.dir) or a checkpoint file (empty: start fresh)"),
      entry("checkpoint.fallback", &C::checkpoint, &CheckpointConfig::fallback,
            "a corrupt checkpoint: error (exit 2) or load the previous complete one", "--fallback"),
      entry("checkpoint.on_failure", &C::checkpoint, &CheckpointConfig::on_failure,
            "a checkpoint that cannot be written: stop (exit code 5) or continue training", "--on-checkpoint-failure"),
      entry("checkpoint.other_runs", &C::checkpoint, &CheckpointConfig::other_runs,
            "checkpoint.dir holds another run's checkpoints: refuse to start, or keep them and write beside them"),
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

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the closest candidate within two edits, else "".
std::string suggestion(const std::string& wrong, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = 3;
  for (const std::string& candidate : candidates) {
    const std::size_t d = edit_distance(wrong, candidate);
    if (d < best_distance) best = candidate, best_distance = d;
  }
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

// Shortest text that reads back to the same double, always recognizably a float ("1.0", not "1").
std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string toml_string(const std::string& value) {
  std::string out = "\"";
  for (const char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

// The value of a field as TOML source text.
std::string toml_value(const FieldRef& field) {
  if (auto p = std::get_if<int*>(&field)) return fmt::format("{}", **p);
  if (auto p = std::get_if<std::int64_t*>(&field)) return fmt::format("{}", **p);
  if (auto p = std::get_if<std::uint64_t*>(&field)) return fmt::format("{}", **p);
  if (auto p = std::get_if<double*>(&field)) return format_double(**p);
  if (auto p = std::get_if<EnumRef>(&field)) return toml_string(std::string(p->get()));
  return toml_string(*std::get<std::string*>(field));
}

const char* type_name(const FieldRef& field) {
  if (std::holds_alternative<int*>(field) || std::holds_alternative<std::int64_t*>(field)) return "INT";
  if (std::holds_alternative<std::uint64_t*>(field)) return "UINT";
  if (std::holds_alternative<double*>(field)) return "FLOAT";
  return "TEXT";
}

void check_choice(const Key& key, const std::string& value, const std::string& shown_key,
                  const std::string& shown_value) {
  if (key.choices.empty() || std::find(key.choices.begin(), key.choices.end(), value) != key.choices.end()) return;
  throw InputError(fmt::format("{} = {}: expected one of {}", shown_key, shown_value, join(key.choices, ", ")));
}

template <class Int>
void parse_integer(const std::string& text, const std::string& shown_key, Int minimum, Int maximum, Int& out) {
  const char* first = text.data();
  const char* last = first + text.size();
  if (first != last && *first == '+') ++first;  // from_chars takes no '+'
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(first, last, value);
  if (first == last || end != last || (error != std::errc() && error != std::errc::result_out_of_range))
    throw InputError(fmt::format("{} = {}: expected an integer", shown_key, text));
  // Every bound fits in an int64 (the seed stops at 2^63 - 1).
  if (error == std::errc::result_out_of_range || value < static_cast<std::int64_t>(minimum) ||
      value > static_cast<std::int64_t>(maximum))
    throw InputError(fmt::format("{} = {}: expected an integer in [{}, {}]", shown_key, text, minimum, maximum));
  out = static_cast<Int>(value);
}

// TOML integers are signed 64-bit, so the unsigned seed stops at 2^63 - 1 to round-trip through to_toml.
constexpr std::uint64_t max_seed = std::numeric_limits<std::int64_t>::max();

// A command-line value (text) into its field.
void assign_text(const Key& key, Config& config, const std::string& text) {
  const std::string shown_key = "--" + key.name;
  const FieldRef field = key.field(config);
  if (auto p = std::get_if<int*>(&field)) {
    parse_integer<int>(text, shown_key, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), **p);
  } else if (auto p = std::get_if<std::int64_t*>(&field)) {
    parse_integer<std::int64_t>(text, shown_key, std::numeric_limits<std::int64_t>::min(),
                                std::numeric_limits<std::int64_t>::max(), **p);
  } else if (auto p = std::get_if<std::uint64_t*>(&field)) {
    parse_integer<std::uint64_t>(text, shown_key, 0, max_seed, **p);
  } else if (auto p = std::get_if<double*>(&field)) {
    const char* first = text.data();
    const char* last = first + text.size();
    if (first != last && *first == '+') ++first;
    double value = 0;
    const auto [end, error] = std::from_chars(first, last, value);
    if (first == last || end != last || error != std::errc())
      throw InputError(fmt::format("{} = {}: expected a number", shown_key, text));
    **p = value;
  } else if (auto p = std::get_if<EnumRef>(&field)) {
    check_choice(key, text, shown_key, text);
    p->set(text);
  } else {
    *std::get<std::string*>(field) = text;
  }
}

// A TOML value as the user would write it (strings in double quotes, as to_toml writes them).
std::string node_text(const toml::node& node) {
  if (node.is_table()) return "{...}";
  if (const auto* text = node.as_string()) return toml_string(text->get());
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return one_line(out.str());
}

// A TOML value into its field; `where` is "file:line: table.key".
void assign_node(const Key& key, Config& config, const toml::node& node, const std::string& where) {
  const FieldRef field = key.field(config);
  const auto fail = [&](const std::string& expected) {
    throw InputError(fmt::format("{} = {}: expected {}", where, node_text(node), expected));
  };
  const auto integer = [&](std::int64_t minimum, std::int64_t maximum) {
    const auto* value = node.as_integer();
    if (!value) fail("an integer");
    if (value->get() < minimum || value->get() > maximum) fail(fmt::format("an integer in [{}, {}]", minimum, maximum));
    return value->get();
  };
  if (auto p = std::get_if<int*>(&field)) {
    **p = static_cast<int>(integer(std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  } else if (auto p = std::get_if<std::int64_t*>(&field)) {
    **p = integer(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
  } else if (auto p = std::get_if<std::uint64_t*>(&field)) {
    **p = static_cast<std::uint64_t>(integer(0, std::numeric_limits<std::int64_t>::max()));
  } else if (auto p = std::get_if<double*>(&field)) {
    if (const auto* value = node.as_floating_point())
      **p = value->get();
    else if (const auto* whole = node.as_integer())
      **p = static_cast<double>(whole->get());
    else
      fail("a number");
  } else {
    const auto* value = node.as_string();
    if (!value) fail("a string");
    if (auto p = std::get_if<EnumRef>(&field)) {
      check_choice(key, value->get(), where, node_text(node));
      p->set(value->get());
    } else {
      *std::get<std::string*>(field) = value->get();
    }
  }
}

toml::table parse_toml(const std::string& text, const std::string& path) {
  const auto failure = [&](const toml::parse_error& error) {
    return InputError(fmt::format("{}:{}:{}: {}", path, error.source().begin.line, error.source().begin.column,
                                  one_line(std::string(error.description()))));
  };
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& error) {
    throw failure(error);
  }
#else
  toml::parse_result result = toml::parse(text, path);
  if (!result) throw failure(result.error());
  return std::move(result).table();
#endif
}

std::string keys_of_table(const std::string& table) {
  std::vector<std::string> names;
  for (const Key& key : keys())
    if (key.table() == table) names.push_back(key.leaf());
  return join(names, ", ");
}

bool is_rank_zero() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return true;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank == 0;
}

// Options that CLI11 did not recognize (they are collected, not thrown, to name them in our own words).
void reject_leftovers(const std::vector<std::string>& leftovers) {
  if (leftovers.empty()) return;
  const std::string& first = leftovers.front();
  if (first.size() < 2 || first[0] != '-') throw InputError(fmt::format("unexpected argument '{}'", first));
  const std::string name = first.substr(0, first.find('='));
  std::vector<std::string> known = {"--preset", "--config", "--help"};
  for (const Key& key : keys()) {
    known.push_back("--" + key.name);
    if (!key.alias.empty()) known.push_back(key.alias);
  }
  throw InputError(fmt::format("unknown option '{}'{}", name, suggestion(name, known)));
}

// parse_config, adding the name of every key the document sets to `given`.
Config parse_config_keys(const std::string& text, const std::string& path, Config base, std::vector<std::string>& given) {
  const toml::table document = parse_toml(text, path);
  const std::vector<std::string> tables = table_names();
  for (const auto& [table_key, node] : document) {
    const std::string table_name(table_key.str());
    const auto line = table_key.source().begin.line;
    const toml::table* table = node.as_table();
    const bool known_table = std::find(tables.begin(), tables.end(), table_name) != tables.end();
    if (!table && known_table)
      throw InputError(fmt::format("{}:{}: '{}' must be a table: [{}]", path, line, table_name, table_name));
    if (!table)
      for (const Key& key : keys())
        if (key.leaf() == table_name)
          throw InputError(fmt::format("{}:{}: unknown key '{}' (keys belong in tables: did you mean [{}] {}?)", path,
                                       line, table_name, key.table(), table_name));
    if (!table || !known_table)
      throw InputError(fmt::format("{}:{}: unknown {} '{}'{} (tables: {})", path, line, table ? "table" : "key",
                                   table_name, suggestion(table_name, tables), join(tables, ", ")));
    for (const auto& [leaf, value] : *table) {
      const std::string name = table_name + "." + std::string(leaf.str());
      const auto key_line = leaf.source().begin.line;
      const Key* key = find_key(name);
      if (!key) {
        std::string hint = suggestion(name, config_keys());
        if (hint.empty()) hint = fmt::format(" ([{}] has {})", table_name, keys_of_table(table_name));
        throw InputError(fmt::format("{}:{}: unknown key '{}'{}", path, key_line, name, hint));
      }
      assign_node(*key, base, value, fmt::format("{}:{}: {}", path, key_line, name));
      given.push_back(name);
    }
  }
  return base;
}

}  // namespace

std::vector<std::string> config_keys() {
  std::vector<std::string> names;
  for (const Key& key : keys()) names.push_back(key.name);
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
  throw InputError(fmt::format("--preset = {}: expected one of {}", name, join(preset_names(), ", ")));
}

Config load_config_file(const std::string& path, Config base) {
  return parse_config(read_bytes(path, path), path, std::move(base));  // never blocks: a FIFO or a device is refused
}

Config parse_config(const std::string& text, const std::string& path, Config base) {
  std::vector<std::string> given;
  return parse_config_keys(text, path, std::move(base), given);
}


std::string to_toml(const Config& config) {
  Config copy = config;  // the key table binds mutable fields
  std::string out, table;
  for (const Key& key : keys()) {
    if (key.table() != table) {
      table = key.table();
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", table);
    }
    out += fmt::format("{} = {}\n", key.leaf(), toml_value(key.field(copy)));
  }
  return out;
}

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
  at_least("model.seq_len", model.seq_len, 2);
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
  positive("pipeline.recv_timeout_s", pipeline.recv_timeout_s);
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

CommandLine parse_command_line(const std::string& program, int argc, const char* const* argv,
                               const ExtraOptions& extra) {
  CLI::App app("Every configuration key is an option --table.key; precedence, lowest first: defaults (the tiny "
               "preset) < --preset < --config file < command-line options.",
               program);
  app.allow_extras();
  app.get_formatter()->column_width(44);
  std::string preset_name, config_path;
  app.add_option("--preset", preset_name, "start from a preset: " + join(preset_names(), ", "))
      ->type_name("NAME")
      ->default_str("tiny")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", config_path, "TOML file of keys, applied over the preset")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  const std::vector<Key>& table = keys();
  std::vector<std::string> values(table.size());
  std::vector<CLI::Option*> options;
  Config defaults;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const Key& key = table[i];
    const FieldRef field = key.field(defaults);
    const std::string names = (key.alias.empty() ? "" : key.alias + ",") + "--" + key.name;
    CLI::Option* option = app.add_option(names, values[i], key.help)
                              ->type_name(key.choices.empty() ? type_name(field) : "{" + join(key.choices, ",") + "}")
                              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                              ->group("[" + key.table() + "]");
    if (const auto* text = std::get_if<std::string*>(&field))
      option->default_str(**text);
    else if (const auto* named = std::get_if<EnumRef>(&field))
      option->default_str(std::string(named->get()));
    else
      option->default_str(toml_value(field));
    options.push_back(option);
  }
  if (extra) extra(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {  // --help
    if (is_rank_zero()) std::cout << app.help() << std::flush;
    return {Config{}, true, 0, Config{}, {}};
  } catch (const CLI::ParseError& error) {
    throw InputError(one_line(error.what()));
  }
  reject_leftovers(app.remaining());

  CommandLine line;
  line.preset = preset_name.empty() ? Config{} : preset(preset_name);
  Config config = line.preset;
  if (!config_path.empty()) {
    if (const std::string reason = unreadable_reason(config_path); !reason.empty())
      throw InputError(fmt::format("--config = {}: cannot open ({})", config_path, reason));
    config = parse_config_keys(read_bytes(config_path, config_path), config_path, config, line.given);
  }
  for (std::size_t i = 0; i < table.size(); ++i)
    if (options[i]->count() > 0) {
      assign_text(table[i], config, values[i]);
      if (std::find(line.given.begin(), line.given.end(), table[i].name) == line.given.end())
        line.given.push_back(table[i].name);
    }
  validate(config);
  line.config = config;
  return line;
}

}  // namespace kpipe
