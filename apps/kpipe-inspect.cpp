// kpipe-inspect: looks into kpipe's HDF5 files.
//   kpipe-inspect CKPT                       step, layout, every tensor with its shape and norms, every byte
//                                            verified against the checkpoint's manifest (exit 3: damaged)
//   kpipe-inspect diff A B                   max abs difference per tensor; exit 1 when they differ
//   kpipe-inspect timeline FILE [--chrome OUT.json] [--svg OUT.svg] [--step N]
//                                            measured bubble per rank, Gantt chart, Perfetto/SVG files
//   kpipe-inspect activations FILE           per layer: ranges of mean/std/absmax, non-finite values
// Exit codes: core/exit_codes.cpp's table (0 fine, 1 diff found differences, 2 bad input, such as a file that is
// no checkpoint, or a failure, 3 a damaged or incomplete checkpoint).
#include <fmt/format.h>
#include <hdf5.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/core/plural.hpp"
#include "kpipe/data/token_file.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/io/timeline.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/io/param_checksum.hpp"
#include "kpipe/data/tokenizer_store.hpp"
#include "kpipe/io/trace.hpp"
#include "kpipe/schedule/bubble.hpp"
#include "kpipe/schedule/render.hpp"

#include "program.hpp"

namespace {

using namespace kpipe;
namespace h5 = kpipe::h5;
using apps::one_line;

constexpr int exit_differ = 1;
constexpr int exit_damaged = 3;  // the checkpoint is damaged or incomplete

// ---- Checkpoints ----

// A dataset's stored values as doubles (floats and bytes alike).
std::vector<double> as_doubles(const io::DatasetEntry& entry, const std::string& bytes) {
  std::vector<double> values(std::size_t(entry.numel()));
  for (std::size_t k = 0; k < values.size(); ++k) {
    if (entry.type == io::ElementType::float32) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * k, 4);
      values[k] = v;
    } else if (entry.type == io::ElementType::float64) {
      std::memcpy(&values[k], bytes.data() + 8 * k, 8);
    } else {
      values[k] = static_cast<unsigned char>(bytes[k]);
    }
  }
  return values;
}

// Every dataset in the file, by path (the manifest's own included).
std::vector<std::string> dataset_paths(hid_t file) {
  std::vector<std::string> paths;
  auto visit = [](hid_t group, const char* name, const H5L_info_t*, void* data) -> herr_t {
    H5O_info_t info;
    h5::QuietErrors quiet;
    // Tensors only: the tokenizer's serialized model (/tokenizer/model) is shown by its kind and vocabulary.
    if (std::strncmp(name, kpipe::data::tokenizer_group, std::strlen(kpipe::data::tokenizer_group)) == 0) return 0;
    if (H5Oget_info_by_name(group, name, &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_DATASET)
      static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
    return 0;
  };
  h5::QuietErrors quiet;
  H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, visit, &paths);
  std::sort(paths.begin(), paths.end());
  return paths;
}

// A file that is no checkpoint at all (a text, a token file, a trace: a path mistyped) is bad input, exit 2,
// not a damaged checkpoint: not HDF5, unless its signature is merely damaged; or HDF5 that says it is another
// kind of file. InputError naming what it is.
void require_checkpoint_kind(const std::string& file) {
  if (!h5::is_hdf5_file(file)) {
    static const unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    const std::string head = read_bytes(file, file, 8);
    int same = 0;
    for (std::size_t i = 0; i < head.size(); ++i) same += static_cast<unsigned char>(head[i]) == signature[i] ? 1 : 0;
    require(same >= 5, "{}: not a kpipe checkpoint: not an HDF5 file", file);
    return;  // a checkpoint whose first bytes are damaged: the reader says so
  }
  const h5::QuietErrors quiet;
  h5::Handle handle;
  try {
    handle = h5::open_file(file);
  } catch (const InputError&) {
    return;  // HDF5 that does not open (a truncated checkpoint): the reader says what is damaged
  }
  if (!h5::has_attribute(handle.get(), "format")) return;
  std::string format;
  try {
    format = h5::read_string_attribute(handle.get(), "format", file);
  } catch (const InputError&) {
    return;
  }
  require(format == io::checkpoint_format, "{}: not a kpipe checkpoint: an HDF5 file of format '{}'{}", file, format,
          format == data::token_file_format ? " (a token file: kpipe-train --data)"
          : format == io::timeline_format   ? " (kpipe-inspect timeline)"
          : format == io::trace_format      ? " (kpipe-inspect activations)"
                                            : "");
}

// Shows the checkpoint and checks every byte of it against its manifest: exit_damaged when anything is
// damaged, missing or not this checkpoint's (every problem listed), 0 when all of it verifies.
int inspect_checkpoint(const std::string& path) {
  const std::string file = io::checkpoint_file_of(path);
  require_checkpoint_kind(file);
  fmt::print("checkpoint {}\n", file);
  std::unique_ptr<io::CheckpointReader> reader;
  try {
    reader = std::make_unique<io::CheckpointReader>(file);
  } catch (const io::CorruptCheckpoint& e) {
    fmt::print("DAMAGED: {}\n", one_line(e.what()));
    return exit_damaged;
  }
  const auto info = io::read_checkpoint_info(file);
  fmt::print("step {} | format version {} | run {} | kpipe {} | created {}\n", info.step, info.format_version,
             info.run_id, info.kpipe_version, info.created);
  fmt::print("layout: pipeline_size {}, data_parallel {}, chunks {}, schedule {} | precision {} ({} masters) | "
             "manifest {} {} | state hash {}\n",
             info.pipeline_size, info.data_parallel, info.chunks, info.schedule, info.precision, info.scalar_type,
             to_string(io::hash_of_format(info.format_version)), hash_hex(info.manifest_hash), info.state_hash.empty() ? "none recorded" : info.state_hash);
  int damaged = 0;
  // Read (and checked) as kpipe-generate would; shown by kind and vocabulary, not listed as a tensor.
  try {
    const auto tokenizer = io::read_tokenizer(*reader);
    fmt::print("tokenizer: {}, vocabulary {}\n", data::to_string(tokenizer.kind()), tokenizer.vocab());
  } catch (const InputError& e) {
    fmt::print("DAMAGED: tokenizer: {}\n", one_line(e.what()));
    ++damaged;
  }
  const std::int64_t named = io::step_of_file_name(std::filesystem::path(file).filename().string());
  if (named >= 0 && named != info.step) {
    fmt::print("DAMAGED: the file's name says step {}, its manifest step {}\n", named, info.step);
    ++damaged;
  }
  const auto& datasets = reader->datasets();
  fmt::print("{} datasets\n\n{:<52} {:>8} {:>16} {:>14} {:>12}\n", datasets.size(), "dataset", "type", "shape",
             "L2 norm", "absmax");
  double total = 0;
  for (const auto& entry : datasets) {
    if (entry.name.rfind(std::string("/") + kpipe::data::tokenizer_group + "/", 0) == 0) continue;  // shown above
    std::string bytes;
    try {
      bytes = reader->read_verified(entry);
    } catch (const io::CorruptCheckpoint& e) {
      fmt::print("{:<52} {:>8} {:>16} DAMAGED: {}\n", entry.name, io::to_string(entry.type),
                 io::shape_text(entry.shape), one_line(e.what()));
      ++damaged;
      continue;
    }
    double squares = 0, absmax = 0;
    for (double v : as_doubles(entry, bytes)) squares += v * v, absmax = std::max(absmax, std::fabs(v));
    if (entry.name.rfind("/model/", 0) == 0) total += squares;
    fmt::print("{:<52} {:>8} {:>16} {:>14.6g} {:>12.6g}\n", entry.name, io::to_string(entry.type),
               io::shape_text(entry.shape), std::sqrt(squares), absmax);
  }
  // What the file holds beyond its manifest is not part of the checkpoint (and never loaded).
  const h5::Handle handle = h5::open_file(file);
  for (const auto& p : dataset_paths(handle.get()))
    if (p != "/manifest" && !reader->find(p)) fmt::print("{:<52} not in the manifest: not part of the checkpoint\n", p);
  fmt::print("\nmodel L2 norm {:.9g}\n", std::sqrt(total));
  if (info.scalar_type == "float32") fmt::print("param_checksum {}\n", hash_hex(io::param_checksum(*reader)));
  if (damaged > 0) {
    fmt::print("DAMAGED: {} found (see above)\n", quantity(damaged, "problem"));
    return exit_damaged;
  }
  fmt::print("verified: every dataset and attribute matches the checksummed manifest\n");
  return 0;
}

int diff_checkpoints(const std::string& a_path, const std::string& b_path) {
  const io::CheckpointReader a(io::checkpoint_file_of(a_path)), b(io::checkpoint_file_of(b_path));
  std::vector<std::string> all;
  for (const auto* r : {&a, &b})
    for (const auto& e : r->datasets()) all.push_back(e.name);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  fmt::print("A {} (step {})\nB {} (step {})\n\n{:<52} {:>14}\n", a.path(), a.number("step"), b.path(),
             b.number("step"), "dataset", "max |A - B|");
  int differing = 0;
  for (const auto& p : all) {
    const io::DatasetEntry* x = a.find(p);
    const io::DatasetEntry* y = b.find(p);
    if (!x || !y) {
      fmt::print("{:<52} {:>14}\n", p, x ? "only in A" : "only in B");
      ++differing;
      continue;
    }
    if (x->shape != y->shape) {
      fmt::print("{:<52} shapes {} and {}\n", p, io::shape_text(x->shape), io::shape_text(y->shape));
      ++differing;
      continue;
    }
    const auto xs = as_doubles(*x, a.read_verified(*x)), ys = as_doubles(*y, b.read_verified(*y));
    double worst = 0;
    bool same = true;
    for (std::size_t k = 0; k < xs.size(); ++k) {
      if (std::memcmp(&xs[k], &ys[k], sizeof(double)) != 0) same = false;
      const double d = std::fabs(xs[k] - ys[k]);
      worst = std::isnan(d) ? d : std::max(worst, d);
    }
    differing += same ? 0 : 1;
    fmt::print("{:<52} {:>14.6g}\n", p, worst);
  }
  fmt::print("\n{} of {} datasets differ\n", differing, all.size());
  // The same weights mean nothing under another vocabulary: the tokenizers must match too (the model blob
  // is compared above as a dataset; this names the difference).
  const auto a_tokenizer = io::read_tokenizer(a), b_tokenizer = io::read_tokenizer(b);
  const bool same_tokenizer = a_tokenizer.kind() == b_tokenizer.kind() &&
                              a_tokenizer.serialized_model() == b_tokenizer.serialized_model();
  if (!same_tokenizer)
    fmt::print("tokenizers differ: A {} (vocabulary {}), B {} (vocabulary {})\n", data::to_string(a_tokenizer.kind()),
               a_tokenizer.vocab(), data::to_string(b_tokenizer.kind()), b_tokenizer.vocab());
  return differing > 0 || !same_tokenizer ? exit_differ : 0;
}

// ---- Timelines ----

// Writes an output whose path require_writable has checked.
void write_file(const std::string& option, const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  require(bool(out), "{} = '{}': cannot write", option, path);
  out << text;
  out.close();
  require(bool(out), "{} = '{}': cannot write", option, path);
}

int inspect_timeline(const std::string& path, const std::string& chrome, const std::string& svg, long long step) {
  // The outputs checked before anything is read or printed: bad input is one line and nothing else.
  if (!chrome.empty()) require_writable(chrome, fmt::format("--chrome = '{}'", chrome));
  if (!svg.empty()) require_writable(svg, fmt::format("--svg = '{}'", svg));
  const auto t = io::read_timeline(path);
  const auto steps = io::timeline_steps(t);
  require(!steps.empty(), "{}: the timeline has no steps", path);
  const std::int64_t shown = step >= 0 ? step : steps.back();
  require(std::binary_search(steps.begin(), steps.end(), shown), "--step = {}: not in {} (steps {} to {})", step, path,
          steps.front(), steps.back());
  fmt::print("timeline {}: schedule {}, {} (pipeline {} x data parallel {}), {} per rank, {} per replica, {}\n",
             path, t.info.schedule, quantity(t.info.ranks, "rank"), t.info.pipeline_size, t.info.data_parallel,
             quantity(t.info.chunks, "chunk"), quantity(t.info.microbatches, "micro-batch"),
             quantity(steps.size(), "step"));
  const auto spans = io::step_timeline(t, shown);
  fmt::print("\nstep {} (seconds since each rank began the step):\n{}", shown,
             schedule::gantt_text(spans, t.info.chunks));
  // The figure kpipe-train prints (schedule/bubble.hpp), from the same timings.
  const auto bubble = io::measured_bubble(t);
  fmt::print("\nmeasured bubble per rank ({}):\n", steps.size() > 1 ? "the steps after the first" : "one step");
  for (int r = 0; r < t.info.ranks; ++r) fmt::print("  rank {:>3}: {:.3f}\n", r, bubble[r]);
  const double mean = schedule::mean_bubble(bubble);
  fmt::print("  mean    : {:.3f}\n", mean);
  // Checkpoint work, slowest rank per checkpoint: what the training waited for, and the write beside it.
  std::map<std::int64_t, std::array<double, 3>> work;
  for (const auto& [rank, c] : t.checkpoints) {
    auto& seconds = work[c.step][int(c.kind)];
    seconds = std::max(seconds, c.end - c.start);
  }
  if (!work.empty()) fmt::print("\ncheckpoints (seconds, slowest rank): snapshot, write, waited for the write before\n");
  for (const auto& [step, seconds] : work)
    fmt::print("  step {:>8}: {:.3f} {:.3f} {:.3f}\n", step, seconds[0], seconds[1], seconds[2]);
  if (!chrome.empty()) {
    write_file("--chrome", chrome, io::chrome_trace(t));
    fmt::print("Chrome trace written to {} (open it in Perfetto)\n", chrome);
  }
  if (!svg.empty()) {
    schedule::SvgOptions options;
    options.title = fmt::format("{}: measured step {}, {}; measured bubble {:.3f}", t.info.schedule, shown,
                                quantity(t.info.ranks, "rank"), mean);
    if (!t.checkpoints.empty()) {  // each rank's checkpoint work during the step, in a lane under its row
      options.side = io::step_checkpoints(t, shown);
      options.side_kinds = {"checkpoint snapshot", "checkpoint write", "waiting for a checkpoint write"};
    }
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
  fmt::print("activation trace {}: {}, layers '{}', {} per step, {}, tensors stored in {}\n\n", path,
             trace.info.every == 1 ? std::string("every step") : fmt::format("every {} steps", trace.info.every),
             trace.info.layers, quantity(trace.info.microbatches, "micro-batch"),
             quantity(trace.info.model_layers, "model layer"), trace.info.dtype);
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


int run(int argc, char** argv) {
  CLI::App app{"Looks into kpipe's HDF5 files: checkpoints, their differences, timelines and activation traces.",
               "kpipe-inspect"};
  app.footer(kpipe::exit_codes_help(kpipe::ProgramName::inspect));
  std::string checkpoint, a, b, file, chrome, svg;
  long long step = -1;
  app.add_option("CKPT", checkpoint,
                 "checkpoint to show and verify: a step-<N>.h5 file, or a checkpoint.dir (its latest)");
  CLI::App* diff = app.add_subcommand("diff", "max |A - B| per tensor; exit 1 when the checkpoints differ");
  diff->add_option("A", a, "checkpoint (a step-<N>.h5 file, or a checkpoint.dir: its latest)")->required();
  diff->add_option("B", b, "checkpoint")->required();
  CLI::App* timeline = app.add_subcommand("timeline", "a step's Gantt chart and the measured bubble per rank");
  timeline->add_option("FILE", file, "timeline HDF5 file (kpipe-train --timeline)")->required();
  timeline->add_option("--chrome", chrome, "write a Chrome trace-event JSON file (Perfetto)");
  timeline->add_option("--svg", svg, "draw the step as SVG");
  timeline->add_option("--step", step, "the step shown (default: the last)");
  CLI::App* activations =
      app.add_subcommand("activations", "per layer: ranges of mean, std, absmax; non-finite values");
  activations->add_option("FILE", file, "activation trace HDF5 file (kpipe-train --trace)")->required();
  for (CLI::App* command : {diff, timeline, activations}) command->footer(app.get_footer());
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    const auto commands = app.get_subcommands();
    std::fputs((commands.empty() ? app.help() : commands.front()->help(app.get_name())).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    throw InputError(one_line(e.what()) + " (kpipe-inspect --help)");
  }
  if (*diff) return diff_checkpoints(a, b);
  if (*timeline) {
    require(timeline->count("--step") == 0 || step >= 1, "--step = {}: expected a step >= 1", step);
    return inspect_timeline(file, chrome, svg, step);
  }
  if (*activations) return inspect_activations(file);
  require(!checkpoint.empty(), "give a checkpoint, or one of diff, timeline, activations (kpipe-inspect --help)");
  return inspect_checkpoint(checkpoint);
}

}  // namespace

int main(int argc, char** argv) {
  return kpipe::apps::run_program(kpipe::ProgramName::inspect, "kpipe-inspect", [&] { return run(argc, argv); });
}
