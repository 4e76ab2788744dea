// kpipe-inspect: looks into kpipe's HDF5 files.
//   kpipe-inspect CKPT                       step, layout, every tensor with its shape and norms
//   kpipe-inspect diff A B                   max abs difference per tensor; exit 1 when they differ
//   kpipe-inspect timeline FILE [--chrome OUT.json] [--svg OUT.svg] [--step N]
//                                            measured bubble per rank, Gantt chart, Perfetto/SVG files
//   kpipe-inspect activations FILE           per layer: ranges of mean/std/absmax, non-finite values
// Exit codes: 0 fine (diff: identical), 1 diff found differences, 2 bad input (one line on stderr).
#include <fmt/format.h>
#include <hdf5.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/h5_file.hpp"
#include "kpipe/io/timeline.hpp"
#include "kpipe/io/tokenizer_store.hpp"
#include "kpipe/io/trace.hpp"
#include "kpipe/schedule/render.hpp"

namespace {

using namespace kpipe;
namespace h5 = kpipe::io::h5;

constexpr int exit_differ = 1;

// ---- Checkpoints ----

struct Tensor {
  std::vector<hsize_t> shape;
  std::vector<double> values;
};

// Every dataset reachable from the entry file (external links followed), by path, in path order.
std::vector<std::string> dataset_paths(hid_t file) {
  std::vector<std::string> paths;
  auto visit = [](hid_t group, const char* name, const H5L_info_t*, void* data) -> herr_t {
    H5O_info_t info;
    h5::QuietErrors quiet;
    // Tensors only: the tokenizer's serialized model (/tokenizer/model) is shown by its kind and vocabulary.
    if (std::strncmp(name, io::tokenizer_group, std::strlen(io::tokenizer_group)) == 0) return 0;
    if (H5Oget_info_by_name(group, name, &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_DATASET)
      static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
    return 0;
  };
  H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, visit, &paths);
  std::sort(paths.begin(), paths.end());
  return paths;
}

Tensor read_tensor(hid_t file, const std::string& path, const std::string& label) {
  Tensor t;
  t.shape = h5::shape(file, path);
  t.values = h5::read_doubles(file, path, label);  // Fletcher32 is verified by HDF5 on this read
  return t;
}

std::string shape_text(const std::vector<hsize_t>& shape) {
  std::string text = "[";
  for (std::size_t k = 0; k < shape.size(); ++k) text += fmt::format("{}{}", k ? ", " : "", shape[k]);
  return text + "]";
}

std::string open_checkpoint(const std::string& path, h5::Handle& file) {
  const std::string entry = io::entry_file_of(path);
  file = h5::open_file(entry);
  return entry;
}

int inspect_checkpoint(const std::string& path) {
  h5::Handle file;
  const std::string entry = open_checkpoint(path, file);
  const auto info = io::read_checkpoint_info(entry);
  fmt::print("checkpoint {}\n", entry);
  fmt::print("step {} | format version {} | kpipe {} | created {}\n", info.step, info.format_version,
             info.kpipe_version, info.created);
  fmt::print("layout: pipeline_size {}, data_parallel {}, chunks {}, schedule {}\n", info.pipeline_size,
             info.data_parallel, info.chunks, info.schedule);
  // Read (and checksummed) as kpipe-generate would; a damaged tokenizer is bad input like a damaged tensor.
  const auto tokenizer = io::read_tokenizer(file.get(), fmt::format("checkpoint file '{}'", entry));
  fmt::print("tokenizer: {}, vocabulary {}\n", kpipe::data::to_string(tokenizer.kind()), tokenizer.vocab());
  const auto paths = dataset_paths(file.get());
  fmt::print("{} tensors\n\n{:<52} {:>16} {:>14} {:>12}\n", paths.size(), "tensor", "shape", "L2 norm", "absmax");
  double total = 0;
  for (const auto& p : paths) {
    const Tensor t = read_tensor(file.get(), p, entry);
    double squares = 0, absmax = 0;
    for (double v : t.values) squares += v * v, absmax = std::max(absmax, std::fabs(v));
    if (p.rfind("/model/", 0) == 0) total += squares;
    fmt::print("{:<52} {:>16} {:>14.6g} {:>12.6g}\n", p, shape_text(t.shape), std::sqrt(squares), absmax);
  }
  fmt::print("\nmodel L2 norm {:.9g}\n", std::sqrt(total));
  return 0;
}

int diff_checkpoints(const std::string& a_path, const std::string& b_path) {
  h5::Handle a, b;
  const std::string a_entry = open_checkpoint(a_path, a), b_entry = open_checkpoint(b_path, b);
  const auto a_paths = dataset_paths(a.get()), b_paths = dataset_paths(b.get());
  std::vector<std::string> all = a_paths;
  all.insert(all.end(), b_paths.begin(), b_paths.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  fmt::print("A {} (step {})\nB {} (step {})\n\n{:<52} {:>14}\n", a_entry, io::read_checkpoint_info(a_entry).step,
             b_entry, io::read_checkpoint_info(b_entry).step, "tensor", "max |A - B|");
  int differing = 0;
  for (const auto& p : all) {
    const bool in_a = std::binary_search(a_paths.begin(), a_paths.end(), p);
    const bool in_b = std::binary_search(b_paths.begin(), b_paths.end(), p);
    if (!in_a || !in_b) {
      fmt::print("{:<52} {:>14}\n", p, in_a ? "only in A" : "only in B");
      ++differing;
      continue;
    }
    const Tensor x = read_tensor(a.get(), p, a_entry), y = read_tensor(b.get(), p, b_entry);
    if (x.shape != y.shape) {
      fmt::print("{:<52} shapes {} and {}\n", p, shape_text(x.shape), shape_text(y.shape));
      ++differing;
      continue;
    }
    double worst = 0;
    bool same = true;
    for (std::size_t k = 0; k < x.values.size(); ++k) {
      if (std::memcmp(&x.values[k], &y.values[k], sizeof(double)) != 0) same = false;
      const double d = std::fabs(x.values[k] - y.values[k]);
      worst = std::isnan(d) ? d : std::max(worst, d);
    }
    differing += same ? 0 : 1;
    fmt::print("{:<52} {:>14.6g}\n", p, worst);
  }
  fmt::print("\n{} of {} tensors differ\n", differing, all.size());
  // The same weights mean nothing under another vocabulary: the tokenizers must match too.
  const auto a_tokenizer = io::read_tokenizer(a.get(), fmt::format("checkpoint file '{}'", a_entry));
  const auto b_tokenizer = io::read_tokenizer(b.get(), fmt::format("checkpoint file '{}'", b_entry));
  const bool same_tokenizer = a_tokenizer.kind() == b_tokenizer.kind() &&
                              a_tokenizer.serialized_model() == b_tokenizer.serialized_model();
  if (!same_tokenizer)
    fmt::print("tokenizers differ: A {} (vocabulary {}), B {} (vocabulary {})\n", kpipe::data::to_string(a_tokenizer.kind()),
               a_tokenizer.vocab(), kpipe::data::to_string(b_tokenizer.kind()), b_tokenizer.vocab());
  return differing > 0 || !same_tokenizer ? exit_differ : 0;
}

// ---- Timelines ----

void write_file(const std::string& option, const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  require(bool(out), "{} = '{}': cannot write", option, path);
  out << text;
  out.close();
  require(bool(out), "{} = '{}': cannot write", option, path);
}

int inspect_timeline(const std::string& path, const std::string& chrome, const std::string& svg, long long step) {
  const auto t = io::read_timeline(path);
  const auto steps = io::timeline_steps(t);
  require(!steps.empty(), "{}: the timeline has no steps", path);
  const std::int64_t shown = step >= 0 ? step : steps.back();
  require(std::binary_search(steps.begin(), steps.end(), shown), "--step = {}: not in {} (steps {} to {})", step, path,
          steps.front(), steps.back());
  fmt::print("timeline {}: schedule {}, {} ranks (pipeline {} x data parallel {}), {} chunks, {} micro-batches per "
             "replica, {} steps\n",
             path, t.info.schedule, t.info.ranks, t.info.pipeline_size, t.info.data_parallel, t.info.chunks,
             t.info.microbatches, steps.size());
  const auto spans = io::step_timeline(t, shown);
  fmt::print("\nstep {} (seconds since each rank began the step):\n{}", shown,
             schedule::gantt_text(spans, t.info.chunks));
  const auto bubble = io::measured_bubble(t);
  fmt::print("\nmeasured bubble per rank ({}):\n", steps.size() > 1 ? "mean over the steps after the first" : "one step");
  double mean = 0;
  for (int r = 0; r < t.info.ranks; ++r) {
    fmt::print("  rank {:>3}: {:.3f}\n", r, bubble[r]);
    mean += bubble[r] / t.info.ranks;
  }
  fmt::print("  mean    : {:.3f}\n", mean);
  if (!chrome.empty()) {
    write_file("--chrome", chrome, io::chrome_trace(t));
    fmt::print("Chrome trace written to {} (open it in Perfetto)\n", chrome);
  }
  if (!svg.empty()) {
    schedule::SvgOptions options;
    options.title = fmt::format("{}: measured step {}, {} ranks, bubble {:.1f}%", t.info.schedule, shown,
                                t.info.ranks, 100 * mean);
    write_file("--svg", svg, schedule::timeline_svg(spans, t.info.chunks, options));
    fmt::print("timeline drawn in {}\n", svg);
  }
  return 0;
}

// ---- Activation traces ----

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  std::string text() const { return lo <= hi ? fmt::format("{:.3g}..{:.3g}", lo, hi) : "-"; }
};

int inspect_activations(const std::string& path) {
  const auto trace = io::read_trace(path);
  fmt::print("activation trace {}: every {} steps, layers '{}', {} micro-batches per step, {} model layers\n\n", path,
             trace.info.every, trace.info.layers, trace.info.microbatches, trace.info.model_layers);
  fmt::print("{:<6} {:<9} {:>5} {:>6} {:>20} {:>20} {:>11} {:>10}\n", "layer", "kind", "rows", "steps", "mean",
             "std", "absmax", "nonfinite");
  int with_nonfinite = 0;
  for (const auto& s : trace.series) {
    Range mean, std;
    double absmax = 0, nonfinite = 0;
    for (const auto& st : s.stats) {
      mean.add(st.mean);
      std.add(st.std);
      if (std::isfinite(st.absmax)) absmax = std::max(absmax, st.absmax);
      nonfinite = std::max(nonfinite, st.nonfinite_fraction);
    }
    std::vector<std::int64_t> steps = s.steps;
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    with_nonfinite += nonfinite > 0 ? 1 : 0;
    fmt::print("{:<6} {:<9} {:>5} {:>6} {:>20} {:>20} {:>11.4g} {:>10}\n", s.layer, io::to_string(s.kind),
               s.stats.size(), steps.size(), mean.text(), std.text(), absmax,
               nonfinite > 0 ? fmt::format("{:.2f}%", 100 * nonfinite) : "0");
  }
  if (!trace.full_tensors.empty()) {
    fmt::print("\nfull tensors (micro-batch 0):\n");
    for (const auto& f : trace.full_tensors) fmt::print("  {}\n", f);
  }
  fmt::print("\n{}\n", with_nonfinite > 0 ? fmt::format("non-finite values in {} series (worst fraction shown)",
                                                        with_nonfinite)
                                          : std::string("all values finite"));
  return 0;
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

int run(int argc, char** argv) {
  const std::string footer =
      "Usage: kpipe-inspect CKPT | diff A B | timeline FILE [--chrome OUT.json] [--svg OUT.svg] [--step N] | "
      "activations FILE\nExit codes: 0 fine (diff: identical); 1 diff: the checkpoints differ; 2 bad input.";
  const std::string mode = argc > 1 ? argv[1] : "";
  CLI::App app{"kpipe-inspect: checkpoints, checkpoint differences, timelines and activation traces"};
  app.footer(footer);
  std::string first, second, chrome, svg;
  long long step = -1;
  if (mode == "diff") {
    app.add_option("A", first, "checkpoint (step-<N> directory, its checkpoint.h5, or a checkpoint.dir)")->required();
    app.add_option("B", second, "checkpoint")->required();
  } else if (mode == "timeline") {
    app.add_option("FILE", first, "timeline HDF5 file (kpipe-train --timeline)")->required();
    app.add_option("--chrome", chrome, "write a Chrome trace-event JSON file (Perfetto)");
    app.add_option("--svg", svg, "draw the step as SVG");
    app.add_option("--step", step, "the step shown (default: the last)");
  } else if (mode == "activations") {
    app.add_option("FILE", first, "activation trace HDF5 file (kpipe-train --trace)")->required();
  } else {
    app.add_option("CKPT", first, "checkpoint: step-<N> directory, its checkpoint.h5, or a checkpoint.dir (latest)")
        ->required();
  }
  const bool sub = mode == "diff" || mode == "timeline" || mode == "activations";
  try {
    app.parse(argc - (sub ? 1 : 0), argv + (sub ? 1 : 0));
  } catch (const CLI::Success&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    throw InputError(one_line(e.what()) + " (kpipe-inspect --help)");
  }
  if (mode == "diff") return diff_checkpoints(first, second);
  if (mode == "timeline") return inspect_timeline(first, chrome, svg, step);
  if (mode == "activations") return inspect_activations(first);
  return inspect_checkpoint(first);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const kpipe::InputError& e) {
    fmt::print(stderr, "kpipe-inspect: error: {}\n", one_line(e.what()));
    return kpipe::exit_bad_input;
  }
}
