#include "kpipe/io/trace.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/core/step_number.hpp"

namespace kpipe::io {

namespace {

// 2: steps numbered from 1 (core/step_number.hpp); 1 numbered them from 0, and is read as such.
constexpr std::int64_t trace_format_version = 2;
constexpr int packed_statistics = 4 + stats_columns;  // layer, kind, step, microbatch, statistics
constexpr int packed_header = 6;                      // layer, kind, step, microbatch, rows, cols

std::string layer_path(int layer) { return fmt::format("layers/{:02d}", layer); }

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

bool parse_int(const std::string& text, int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && value >= 0;
}

double nan() { return std::numeric_limits<double>::quiet_NaN(); }

}  // namespace

// ---- Statistics on the device ----

template <class T> TensorStats tensor_stats(const ExecSpace& space, const View2<const T>& x) {
  const std::int64_t cols = std::int64_t(x.extent(1));
  const std::int64_t n = std::int64_t(x.extent(0)) * cols;
  TensorStats s;
  if (n == 0) return s;
  // Two passes over the tensor: count, sum, min and max together, then the squares about the mean (not
  // E[x^2] - E[x]^2, which cancels). A traced step runs this between its actions, so each pass is time the
  // step's neighbours wait for.
  double sum = 0, lo = 0, hi = 0;
  std::int64_t finite = 0;
  Kokkos::parallel_reduce(
      "kpipe::io::tensor_stats::count_sum_min_max", range(space, n),
      KOKKOS_LAMBDA(std::int64_t k, std::int64_t& c, double& acc, double& lo_k, double& hi_k) {
        const double v = widen<double>(x(k / cols, k % cols));
        if (!math::isfinite(v)) return;
        ++c;
        acc += v;
        if (v < lo_k) lo_k = v;
        if (v > hi_k) hi_k = v;
      },
      finite, sum, Kokkos::Min<double>(lo), Kokkos::Max<double>(hi));
  s.nonfinite_fraction = double(n - finite) / double(n);
  if (finite == 0) {
    s.mean = s.std = s.min = s.max = s.absmax = nan();
    return s;
  }
  const double mean = sum / double(finite);
  double squares = 0;
  Kokkos::parallel_reduce(
      "kpipe::io::tensor_stats::squares", range(space, n),
      KOKKOS_LAMBDA(std::int64_t k, double& acc) {
        const double v = widen<double>(x(k / cols, k % cols));
        if (math::isfinite(v)) acc += (v - mean) * (v - mean);
      },
      squares);
  s.mean = mean;
  s.std = std::sqrt(squares / double(finite));
  s.min = lo;
  s.max = hi;
  s.absmax = std::max(std::fabs(lo), std::fabs(hi));
  return s;
}

// ---- Layer selection ----

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative matching with one backtrack point for the last '*'.
  std::size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

LayerSelection::LayerSelection(const std::string& spec) {
  std::string item;
  std::size_t start = 0;
  require(!trim(spec).empty(), "output.trace_layers = \"{}\": expected all, indices, ranges or globs", spec);
  while (start <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', start), spec.size());
    item = trim(spec.substr(start, comma - start));
    start = comma + 1;
    require(!item.empty(), "output.trace_layers = \"{}\": empty item", spec);
    if (item == "all" || item == "*") {
      ranges_.emplace_back(0, INT_MAX);
      continue;
    }
    if (item.find_first_of("*?/") != std::string::npos || item.find_first_not_of("0123456789-") != std::string::npos) {
      require(item.find('/') != std::string::npos || item.find_first_of("*?") != std::string::npos,
              "output.trace_layers = \"{}\": '{}' is neither an index, a range a-b nor a glob on layers/NN", spec,
              item);
      globs_.push_back(item);
      continue;
    }
    const auto dash = item.find('-');
    int first = 0, last = 0;
    const bool ok = dash == std::string::npos
                        ? parse_int(item, first) && parse_int(item, last)
                        : parse_int(item.substr(0, dash), first) && parse_int(item.substr(dash + 1), last);
    require(ok && first <= last, "output.trace_layers = \"{}\": '{}' is not an index or a range a-b", spec, item);
    ranges_.emplace_back(first, last);
  }
}

bool LayerSelection::contains(int layer) const {
  for (const auto& [first, last] : ranges_)
    if (layer >= first && layer <= last) return true;
  const std::string path = layer_path(layer);
  for (const auto& glob : globs_)
    if (glob_match(glob, path)) return true;
  return false;
}

const char* to_string(TraceKind kind) { return kind == TraceKind::output ? "output" : "gradient"; }

// ---- The file ----

TraceWriter::TraceWriter(const std::string& path, const TraceInfo& info) : path_(path) {
  require_writable(path, fmt::format("output.trace = '{}'", path));
  const auto hdf5 = h5::exclusive();
  file_ = h5::create_file(path);
  const hid_t root = file_.get();
  h5::write_format(root, trace_format, trace_format_version);
  h5::write_attribute(root, "every", info.every);
  h5::write_attribute(root, "layers", info.layers);
  h5::write_attribute(root, "microbatches", std::int64_t(info.microbatches));
  h5::write_attribute(root, "model_layers", std::int64_t(info.model_layers));
  h5::write_attribute(root, "stats_columns", std::string(stats_column_names));
  h5::write_attribute(root, "config", info.config);
  h5::write_attribute(root, "dtype", info.dtype);
}

TraceWriter::~TraceWriter() {
  const auto hdf5 = h5::exclusive();
  file_.reset();
}

void TraceWriter::append(std::vector<TraceRow> rows, const std::vector<TraceTensor>& tensors) {
  std::sort(rows.begin(), rows.end(), [](const TraceRow& a, const TraceRow& b) {
    return std::tie(a.layer, a.kind, a.step, a.microbatch) < std::tie(b.layer, b.kind, b.step, b.microbatch);
  });
  const auto hdf5 = h5::exclusive();
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i;
    std::vector<std::int64_t> steps, microbatches;
    std::vector<double> stats;
    for (; j < rows.size() && rows[j].layer == rows[i].layer && rows[j].kind == rows[i].kind; ++j) {
      const TensorStats& s = rows[j].stats;
      steps.push_back(rows[j].step);
      microbatches.push_back(rows[j].microbatch);
      stats.insert(stats.end(), {s.mean, s.std, s.min, s.max, s.absmax, s.nonfinite_fraction});
    }
    const std::string group_path = layer_path(rows[i].layer) + "/" + to_string(rows[i].kind);
    const bool fresh = !h5::exists(file_.get(), group_path);
    const h5::Handle group = h5::require_group(file_.get(), group_path);
    h5::append(group.get(), "step", steps);
    h5::append(group.get(), "microbatch", microbatches);
    h5::append(group.get(), "stats", stats, {hsize_t(stats_columns)});
    if (fresh) {
      const h5::Handle dataset(H5Dopen2(group.get(), "stats", H5P_DEFAULT), H5Dclose);
      h5::write_attribute(dataset.get(), "columns", std::string(stats_column_names));
    }
    i = j;
  }
  for (const TraceTensor& t : tensors) {
    const h5::Handle group =
        h5::require_group(file_.get(), "full/" + layer_path(t.layer) + "/" + to_string(t.kind));
    h5::append(group.get(), "step", std::vector<std::int64_t>{t.step});
    h5::append(group.get(), "microbatch", std::vector<std::int64_t>{t.microbatch});
    h5::append(group.get(), "values", t.values, {hsize_t(t.rows), hsize_t(t.cols)});
  }
  H5Fflush(file_.get(), H5F_SCOPE_GLOBAL);
}

TraceFile read_trace(const std::string& path) {
  const h5::Handle file = h5::open_file(path);
  const hid_t root = file.get();
  require(h5::has_format(root, trace_format, path), "{}: not a kpipe activation trace (attribute format != {})", path,
          trace_format);
  const std::int64_t version = h5::read_int_attribute(root, "format_version", path);
  require(version >= 1 && version <= trace_format_version,
          "{}: format_version {} is not read by this kpipe, which reads 1 to {}", path, version, trace_format_version);
  const std::int64_t first_step = version == 1 ? 0 : 1;  // what the file numbers the first step
  TraceFile trace;
  trace.info.every = h5::read_int_attribute(root, "every", path);
  trace.info.layers = h5::read_string_attribute(root, "layers", path);
  trace.info.microbatches = int(h5::read_int_attribute(root, "microbatches", path));
  trace.info.model_layers = int(h5::read_int_attribute(root, "model_layers", path));
  trace.info.config = h5::read_string_attribute(root, "config", path);
  // Traces written before precisions were recorded hold float32.
  if (h5::has_attribute(root, "dtype")) trace.info.dtype = h5::read_string_attribute(root, "dtype", path);
  if (h5::exists(root, "layers")) {
    const h5::Handle layers = h5::open_group(root, "layers");
    for (const std::string& name : h5::children(layers.get())) {
      int layer = 0;
      require(parse_int(name, layer), "{}: /layers/{} is not a layer index", path, name);
      for (TraceKind kind : {TraceKind::output, TraceKind::gradient}) {
        const std::string group_path = name + "/" + to_string(kind);
        if (!h5::exists(layers.get(), group_path)) continue;
        const h5::Handle group = h5::open_group(layers.get(), group_path);
        const std::string label = fmt::format("{}:/layers/{}", path, group_path);
        TraceSeries series;
        series.layer = layer;
        series.kind = kind;
        series.steps = h5::read_int64s(group.get(), "step", label);
        for (auto& step : series.steps) step = step_number(step - first_step);
        series.microbatches = h5::read_int64s(group.get(), "microbatch", label);
        const auto shape = h5::shape(group.get(), "stats");
        require(shape.size() == 2 && shape[1] == hsize_t(stats_columns) && shape[0] == series.steps.size() &&
                    series.microbatches.size() == series.steps.size(),
                "{}: stats, step and microbatch have inconsistent shapes", label);
        const auto values = h5::read_doubles(group.get(), "stats", label);
        for (std::size_t r = 0; r < series.steps.size(); ++r) {
          const double* v = values.data() + r * stats_columns;
          series.stats.push_back({v[0], v[1], v[2], v[3], v[4], v[5]});
        }
        trace.series.push_back(std::move(series));
      }
    }
    std::stable_sort(trace.series.begin(), trace.series.end(), [](const TraceSeries& a, const TraceSeries& b) {
      return std::tie(a.layer, a.kind) < std::tie(b.layer, b.kind);
    });
  }
  if (h5::exists(root, "full/layers")) {
    const h5::Handle layers = h5::open_group(root, "full/layers");
    for (const std::string& name : h5::children(layers.get()))
      for (TraceKind kind : {TraceKind::output, TraceKind::gradient})
        if (h5::exists(layers.get(), name + "/" + to_string(kind) + "/values"))
          trace.full_tensors.push_back(fmt::format("/full/layers/{}/{}/values", name, to_string(kind)));
  }
  return trace;
}

TraceOptions trace_options(const Config& config) {
  TraceOptions options;
  options.path = config.output.trace;
  options.every = config.output.trace_every;
  options.layers = config.output.trace_layers;
  options.full = config.output.trace_full != 0;
  return options;
}

// ---- The tracer ----

template <class T, class A>
ActivationTracer<T, A>::ActivationTracer(const runtime::StageModel<T, A>& stage, const runtime::RunPlan& plan,
                                      const TraceOptions& options)
    : stage_(&stage),
      plan_(&plan),
      grid_(stage.grid()),
      options_(options),
      selection_(options.layers),
      timeout_s_(stage.config().pipeline.recv_timeout_s) {
  const Config& config = stage.config();
  const auto& grid = stage.grid();
  require(options.every >= 1, "output.trace_every = {}: expected an integer >= 1", options.every);
  if (grid.world_rank == 0) {
    TraceInfo info;
    info.every = options.every;
    info.layers = options.layers;
    info.microbatches = config.train.microbatches;
    info.model_layers = int(stage.desc().layers.size());
    info.config = to_toml(config);
    info.dtype = type_name<A>();
    writer_ = std::make_unique<TraceWriter>(options.path, info);
  }
}

template <class T, class A> void ActivationTracer<T, A>::begin_step(std::int64_t step_index) {
  step_ = step_number(step_index);
  active_ = step_ % options_.every == 0;
  rows_.clear();
  tensors_.clear();
}

template <class T, class A> void ActivationTracer<T, A>::observe(const schedule::Action& action, int slot) {
  using schedule::Op;
  if (!active_ || action.op == Op::backward_weight) return;
  const TraceKind kind = action.op == Op::forward ? TraceKind::output : TraceKind::gradient;
  const auto& chunk = stage_->chunk(action.chunk);
  const int microbatch = plan_->global_microbatch(action.microbatch);
  for (int layer = 0; layer < int(stage_->desc().layers.size()); ++layer) {
    if (!chunk.has_layer(layer) || !selection_.contains(layer)) continue;
    // The head's logits stay in T under mixed precision; every other tensor is stored in A.
    if (kind == TraceKind::output && mixed_precision<T, A> && layer == int(stage_->desc().layers.size()) - 1)
      record(layer, kind, microbatch, chunk.logits(slot));
    else
      record(layer, kind, microbatch,
             kind == TraceKind::output ? chunk.layer_output(slot, layer) : chunk.layer_output_grad(slot, layer));
  }
}

template <class T, class A>
template <class E>
void ActivationTracer<T, A>::record(int layer, TraceKind kind, int microbatch, const View2<const E>& x) {
  rows_.push_back({layer, kind, step_, microbatch, tensor_stats<E>(space_, x)});
  if (!options_.full || microbatch != 0) return;
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), x);
  TraceTensor t{layer, kind, step_, microbatch, std::int64_t(x.extent(0)), std::int64_t(x.extent(1)), {}};
  t.values.reserve(host.span());
  for (std::size_t k = 0; k < host.span(); ++k) t.values.push_back(widen<float>(host.data()[k]));
  tensors_.push_back(std::move(t));
}

template <class T, class A> void ActivationTracer<T, A>::end_step() {
  if (!active_) return;
  active_ = false;
  std::vector<double> packed;
  for (const TraceRow& r : rows_) {
    const TensorStats& s = r.stats;
    packed.insert(packed.end(), {double(r.layer), double(int(r.kind)), double(r.step), double(r.microbatch), s.mean,
                                 s.std, s.min, s.max, s.absmax, s.nonfinite_fraction});
  }
  std::vector<std::int64_t> headers;
  std::vector<float> values;
  for (const TraceTensor& t : tensors_) {
    headers.insert(headers.end(), {t.layer, std::int64_t(t.kind), t.step, t.microbatch, t.rows, t.cols});
    values.insert(values.end(), t.values.begin(), t.values.end());
  }
  const comm::Bound bound{timeout_s_, fmt::format("gathering the activation trace of step {}", step_)};
  const auto all_rows = comm::gatherv(packed, 0, grid_.world, bound);
  const auto all_headers = comm::gatherv(headers, 0, grid_.world, bound);
  const auto all_values = comm::gatherv(values, 0, grid_.world, bound);
  rows_.clear();
  tensors_.clear();
  if (!writer_) return;
  std::vector<TraceRow> rows;
  for (std::size_t k = 0; k + packed_statistics <= all_rows.size(); k += packed_statistics) {
    const double* v = all_rows.data() + k;
    rows.push_back({int(v[0]), TraceKind(int(v[1])), std::int64_t(v[2]), int(v[3]), {v[4], v[5], v[6], v[7], v[8], v[9]}});
  }
  std::vector<TraceTensor> tensors;
  std::size_t offset = 0;
  for (std::size_t k = 0; k + packed_header <= all_headers.size(); k += packed_header) {
    const std::int64_t* h = all_headers.data() + k;
    TraceTensor t{int(h[0]), TraceKind(int(h[1])), h[2], int(h[3]), h[4], h[5], {}};
    const auto count = std::size_t(h[4] * h[5]);
    t.values.assign(all_values.begin() + std::ptrdiff_t(offset), all_values.begin() + std::ptrdiff_t(offset + count));
    offset += count;
    tensors.push_back(std::move(t));
  }
  writer_->append(std::move(rows), tensors);
}

// The statistics over A alone (T unused), also at float64 (tests/io/test_trace.cpp); the tracer as a run trains.
#define KPIPE_INSTANTIATE_CHECKED(T, A) template TensorStats tensor_stats<A>(const ExecSpace&, const View2<const A>&);
#define KPIPE_INSTANTIATE(T, A) template class ActivationTracer<T, A>;
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE_CHECKED)
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE_CHECKED
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io
