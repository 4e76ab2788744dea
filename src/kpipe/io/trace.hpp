#pragma once
// Activation traces: every K steps, for the layers a pattern selects, per micro-batch, the statistics of
// each layer's output (after its forward) and of the gradient with respect to that output (after its
// backward), computed on the device and copied to the host as six numbers; optionally the full tensors of
// micro-batch 0. Every rank records its own layers; at the end of a traced step rank 0 gathers the rows and
// appends them to one HDF5 file (layout in docs/traces.md).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_stats.hpp"

namespace kpipe::io {

inline constexpr const char* trace_format = "kpipe-activation-trace";  // the root attribute "format" of the file

// Statistics over a tensor's finite elements (NaN when it has none); nonfinite_fraction over all of them.
struct TensorStats {
  double mean = 0, std = 0, min = 0, max = 0, absmax = 0, nonfinite_fraction = 0;
};
inline constexpr int stats_columns = 6;
inline constexpr const char* stats_column_names = "mean,std,min,max,absmax,nonfinite_fraction";

// Deterministic device reductions (sum, count, min, max, then squared deviations from the mean): only the
// results come to the host. std is the population standard deviation.
template <class T> TensorStats tensor_stats(const ExecSpace& space, const View2<const T>& x);

// Which layers to trace. Comma-separated items, each "all" (or "*"), an index ("7"), a range of indices
// ("2-5", inclusive) or a glob on the layer's path ("layers/0?", "layers/1*"). Layer 0 is the embedding,
// the last the head. InputError naming output.trace_layers on bad syntax.
class LayerSelection {
 public:
  explicit LayerSelection(const std::string& spec);
  bool contains(int layer) const;

 private:
  std::vector<std::string> globs_;
  std::vector<std::pair<int, int>> ranges_;
};

// '*' any run of characters, '?' one character, everything else itself.
bool glob_match(const std::string& pattern, const std::string& text);

enum class TraceKind : int { output = 0, gradient = 1 };
const char* to_string(TraceKind kind);  // "output", "gradient"

struct TraceRow {
  int layer = 0;
  TraceKind kind = TraceKind::output;
  std::int64_t step = 0;
  int microbatch = 0;  // global: replica * (microbatches / data_parallel) + local micro-batch
  TensorStats stats;
};

struct TraceTensor {
  int layer = 0;
  TraceKind kind = TraceKind::output;
  std::int64_t step = 0;
  int microbatch = 0;
  std::int64_t rows = 0, cols = 0;
  std::vector<float> values;  // row-major [rows, cols]
};

struct TraceInfo {
  std::int64_t every = 1;  // step N (numbered from 1) is traced when N % every == 0
  std::string layers = "all";
  int microbatches = 1;    // per step, all replicas
  int model_layers = 0;    // embedding + blocks + head
  std::string config;      // the run's configuration, TOML
  // What the traced activations and gradients were stored in: "float32", "bf16" (train.precision), "float64".
  // Statistics are computed from the stored values in double; full tensors are widened to float32.
  std::string dtype = "float32";
};

// The HDF5 file, written by one process (no MPI here), under h5::exclusive() (a checkpoint may be written
// beside it).
class TraceWriter {
 public:
  TraceWriter(const std::string& path, const TraceInfo& info);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  // Rows are appended in (layer, kind, step, microbatch) order, whatever order they come in.
  void append(std::vector<TraceRow> rows, const std::vector<TraceTensor>& tensors = {});
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  h5::Handle file_;
};

// One (layer, kind) series of a trace file, one entry per (step, micro-batch).
struct TraceSeries {
  int layer = 0;
  TraceKind kind = TraceKind::output;
  std::vector<std::int64_t> steps, microbatches;
  std::vector<TensorStats> stats;
};

struct TraceFile {
  TraceInfo info;
  std::vector<TraceSeries> series;              // by layer, output before gradient
  std::vector<std::string> full_tensors;        // dataset paths of the full tensors, if any
};

// Reads a trace; InputError naming the file and what is wrong with it.
TraceFile read_trace(const std::string& path);

struct TraceOptions {
  std::string path;              // empty: no trace
  std::int64_t every = 1;
  std::string layers = "all";
  bool full = false;             // also the full tensors of micro-batch 0
};

TraceOptions trace_options(const Config& config);

// Reads a stage model's layer outputs and gradients after each compute action (install observer() as the
// trainer's, and remove it before the tracer goes) and writes the trace. Construct and call begin_step /
// end_step on every rank of the world alike.
template <class T, class A = T> class ActivationTracer {
 public:
  ActivationTracer(const runtime::StageModel<T, A>& stage, const runtime::RunPlan& plan, const TraceOptions& options);
  ActivationTracer(const ActivationTracer&) = delete;
  ActivationTracer& operator=(const ActivationTracer&) = delete;

  // Records during the step of index `step_index` (from 0, as the trainer counts) when its number (from 1) is a
  // multiple of `every`; the file holds that number.
  void begin_step(std::int64_t step_index);
  void end_step();                     // collective over the world: rank 0 appends what every rank recorded
  runtime::ActionObserver observer() {
    return [this](const schedule::Action& action, int slot) { observe(action, slot); };
  }

 private:
  void observe(const schedule::Action& action, int slot);
  template <class E> void record(int layer, TraceKind kind, int microbatch, const View2<const E>& x);

  const runtime::StageModel<T, A>* stage_;
  const runtime::RunPlan* plan_;
  comm::ProcessGrid grid_;
  TraceOptions options_;
  LayerSelection selection_;
  double timeout_s_;  // bound of the gathers (pipeline.recv_timeout_s)
  std::int64_t step_ = 0;
  bool active_ = false;
  std::vector<TraceRow> rows_;
  std::vector<TraceTensor> tensors_;
  std::unique_ptr<TraceWriter> writer_;  // rank 0 only
  ExecSpace space_;
};

}  // namespace kpipe::io
