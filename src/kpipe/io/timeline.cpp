#include "kpipe/io/timeline.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/program_name.hpp"
#include "kpipe/core/step_number.hpp"
#include "kpipe/schedule/bubble.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::io {

namespace {

// 2: steps numbered from 1 (core/step_number.hpp); 1 numbered them from 0, and is read as such.
constexpr std::int64_t timeline_format_version = 2;
constexpr const char* op_names =
    "F,B,I,W,S,send_activation,recv_activation,send_gradient,recv_gradient,send_sum,recv_sum,U";
constexpr int last_op = int(schedule::Op::update);
constexpr int packed_interval = 9;  // step, rank, op, microbatch, chunk, peer, start, end, bytes

const char* category(schedule::Op op) {
  switch (op) {
    case schedule::Op::forward: return "F";
    case schedule::Op::backward: return "B";
    case schedule::Op::backward_input: return "I";
    case schedule::Op::backward_weight: return "W";
    case schedule::Op::step: return "S";
    default: return "message";
  }
}

}  // namespace

TimelineWriter::TimelineWriter(const std::string& path, const TimelineInfo& info, double write_seconds)
    : path_(path), write_interval_(write_seconds) {
  require_writable(path, fmt::format("output.timeline = '{}'", path));
  file_ = h5::create_file(path);
  const hid_t root = file_.get();
  h5::write_format(root, timeline_format, timeline_format_version);
  h5::write_attribute(root, "ranks", std::int64_t(info.ranks));
  h5::write_attribute(root, "pipeline_size", std::int64_t(info.pipeline_size));
  h5::write_attribute(root, "data_parallel", std::int64_t(info.data_parallel));
  h5::write_attribute(root, "chunks", std::int64_t(info.chunks));
  h5::write_attribute(root, "microbatches", std::int64_t(info.microbatches));
  h5::write_attribute(root, "schedule", info.schedule);
  const h5::Handle group = h5::require_group(root, "timeline");
  h5::write_attribute(group.get(), "ops", std::string(op_names));
  // Empty columns, so that a run with no step still has the tables.
  h5::require_group(root, "steps");
  write_pending();
}

TimelineWriter::~TimelineWriter() {
  try {
    write_pending();
  } catch (const std::exception& e) {  // a destructor reports and goes on: the rows written so far stay
    fmt::print(stderr, "{}: {}: the timeline's last rows were not written: {}\n", program_name(), path_, e.what());
  }
}

void TimelineWriter::append(const StepRow& row) { pending_steps_.push_back(row); }

void TimelineWriter::append(const std::vector<TimelineRow>& rows) {
  pending_rows_.insert(pending_rows_.end(), rows.begin(), rows.end());
  if (std::chrono::steady_clock::now() - written_ >= write_interval_) write_pending();
}

void TimelineWriter::write_pending() {
  write_steps(pending_steps_);
  write_rows(pending_rows_);
  pending_steps_.clear();
  pending_rows_.clear();
  H5Fflush(file_.get(), H5F_SCOPE_GLOBAL);
  written_ = std::chrono::steady_clock::now();
}

void TimelineWriter::write_steps(const std::vector<StepRow>& rows) {
  std::vector<std::int64_t> step, tokens;
  std::vector<double> loss, lr, grad_norm, seconds;
  for (const StepRow& r : rows) {
    step.push_back(r.step);
    loss.push_back(r.loss);
    lr.push_back(r.lr);
    grad_norm.push_back(r.grad_norm);
    seconds.push_back(r.seconds);
    tokens.push_back(r.tokens);
  }
  const h5::Handle group = h5::open_group(file_.get(), "steps");
  const hid_t g = group.get();
  h5::append(g, "step", step);
  h5::append(g, "loss", loss);
  h5::append(g, "lr", lr);
  h5::append(g, "grad_norm", grad_norm);
  h5::append(g, "seconds", seconds);
  h5::append(g, "tokens", tokens);
}

void TimelineWriter::write_rows(const std::vector<TimelineRow>& rows) {
  const h5::Handle group = h5::open_group(file_.get(), "timeline");
  std::vector<std::int64_t> step, bytes;
  std::vector<std::int32_t> rank, op, microbatch, chunk, peer;
  std::vector<double> start, end;
  for (const TimelineRow& r : rows) {
    step.push_back(r.step);
    rank.push_back(r.rank);
    op.push_back(int(r.action.op));
    microbatch.push_back(r.action.microbatch);
    chunk.push_back(r.action.chunk);
    peer.push_back(r.action.peer);
    start.push_back(r.start);
    end.push_back(r.end);
    bytes.push_back(r.bytes);
  }
  const hid_t g = group.get();
  h5::append(g, "step", step);
  h5::append(g, "rank", rank);
  h5::append(g, "op", op);
  h5::append(g, "microbatch", microbatch);
  h5::append(g, "chunk", chunk);
  h5::append(g, "peer", peer);
  h5::append(g, "start", start);
  h5::append(g, "end", end);
  h5::append(g, "bytes", bytes);
}

TimelineFile read_timeline(const std::string& path) {
  const h5::Handle file = h5::open_file(path);
  const hid_t root = file.get();
  require(h5::has_format(root, timeline_format, path), "{}: not a kpipe timeline (attribute format != {})", path,
          timeline_format);
  const std::int64_t version = h5::read_int_attribute(root, "format_version", path);
  require(version >= 1 && version <= timeline_format_version,
          "{}: format_version {} is not read by this kpipe, which reads 1 to {}", path, version,
          timeline_format_version);
  const std::int64_t first_step = version == 1 ? 0 : 1;  // what the file numbers the first step
  TimelineFile t;
  t.info.ranks = int(h5::read_int_attribute(root, "ranks", path));
  t.info.pipeline_size = int(h5::read_int_attribute(root, "pipeline_size", path));
  t.info.data_parallel = int(h5::read_int_attribute(root, "data_parallel", path));
  t.info.chunks = int(h5::read_int_attribute(root, "chunks", path));
  t.info.microbatches = int(h5::read_int_attribute(root, "microbatches", path));
  t.info.schedule = h5::read_string_attribute(root, "schedule", path);
  require(t.info.ranks >= 1 && t.info.chunks >= 1, "{}: ranks = {}, chunks = {}: expected at least 1", path,
          t.info.ranks, t.info.chunks);
  require(h5::exists(root, "timeline"), "{}: no group /timeline", path);
  const h5::Handle group = h5::open_group(root, "timeline");
  const std::string label = path + ":/timeline";
  const hid_t g = group.get();
  const auto step = h5::read_int64s(g, "step", label), rank = h5::read_int64s(g, "rank", label),
             op = h5::read_int64s(g, "op", label), microbatch = h5::read_int64s(g, "microbatch", label),
             chunk = h5::read_int64s(g, "chunk", label), peer = h5::read_int64s(g, "peer", label),
             bytes = h5::read_int64s(g, "bytes", label);
  const auto start = h5::read_doubles(g, "start", label), end = h5::read_doubles(g, "end", label);
  const std::size_t n = step.size();
  for (const std::size_t size : {rank.size(), op.size(), microbatch.size(), chunk.size(), peer.size(), bytes.size(),
                                 start.size(), end.size()})
    require(size == n, "{}: columns of different lengths ({} and {})", label, n, size);
  for (std::size_t k = 0; k < n; ++k) {
    require(op[k] >= 0 && op[k] <= last_op, "{}: row {}: op = {} is not an action kind", label, k, op[k]);
    require(rank[k] >= 0 && rank[k] < t.info.ranks, "{}: row {}: rank = {} outside [0, {})", label, k, rank[k],
            t.info.ranks);
    require(chunk[k] >= 0 && chunk[k] < t.info.chunks, "{}: row {}: chunk = {} outside [0, {})", label, k, chunk[k],
            t.info.chunks);
    TimelineRow row;
    row.step = step_number(step[k] - first_step);
    row.rank = int(rank[k]);
    row.action = schedule::Action{schedule::Op(op[k]), int(microbatch[k]), int(chunk[k]), int(peer[k])};
    row.start = start[k];
    row.end = end[k];
    row.bytes = bytes[k];
    t.rows.push_back(row);
  }
  return t;
}

std::vector<std::int64_t> timeline_steps(const TimelineFile& timeline) {
  std::set<std::int64_t> steps;
  for (const auto& r : timeline.rows) steps.insert(r.step);
  return {steps.begin(), steps.end()};
}

schedule::Timeline step_timeline(const TimelineFile& timeline, std::int64_t step) {
  schedule::Timeline spans(timeline.info.ranks);
  for (const auto& r : timeline.rows)
    if (r.step == step && (schedule::is_compute(r.action.op) || r.action.op == schedule::Op::update))
      spans[r.rank].push_back(schedule::Span{r.action, r.start, r.end});
  return spans;
}

std::vector<double> measured_bubble(const TimelineFile& timeline) {
  const auto steps = timeline_steps(timeline);
  const int ranks = timeline.info.ranks;
  // Each rank's actions by step, the first step left out (it allocates) unless it is the only one.
  std::map<std::pair<std::int64_t, int>, std::vector<TimelineRow>> actions;
  for (const auto& r : timeline.rows)
    if (steps.size() == 1 || r.step != steps.front()) actions[{r.step, r.rank}].push_back(r);
  std::vector<schedule::RankTime> times(static_cast<std::size_t>(ranks));
  for (const auto& [key, rows] : actions) schedule::add_step(times.at(std::size_t(key.second)), rows);
  // World rank w is stage w % pipeline_size of replica w / pipeline_size (comm/grid.hpp): each pipeline apart.
  const int p = std::max(timeline.info.pipeline_size, 1);
  std::vector<double> bubble;
  for (int first = 0; first < ranks; first += p) {
    const std::vector<schedule::RankTime> pipeline(times.begin() + first, times.begin() + std::min(first + p, ranks));
    const auto idle = schedule::idle_fractions(pipeline);
    bubble.insert(bubble.end(), idle.begin(), idle.end());
  }
  return bubble;
}

std::string chrome_trace(const TimelineFile& timeline) {
  const auto steps = timeline_steps(timeline);
  std::map<std::int64_t, double> step_length, step_offset;
  for (const auto& r : timeline.rows) step_length[r.step] = std::max(step_length[r.step], r.end);
  double offset = 0;
  for (const auto s : steps) {
    step_offset[s] = offset;
    offset += step_length[s];
  }
  nlohmann::json events = nlohmann::json::array();
  for (int rank = 0; rank < timeline.info.ranks; ++rank) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", rank},
                      {"args", {{"name", fmt::format("rank {}", rank)}}}});
  }
  for (const auto& r : timeline.rows) {
    nlohmann::json args = {{"step", r.step}, {"microbatch", r.action.microbatch}, {"chunk", r.action.chunk}};
    if (schedule::is_comm(r.action.op) || schedule::is_reduction(r.action.op)) {
      args["peer"] = r.action.peer;
      args["bytes"] = r.bytes;
    }
    const double start_us = (step_offset[r.step] + r.start) * 1e6;
    events.push_back({{"name", schedule::to_token(r.action, timeline.info.chunks)},
                      {"cat", category(r.action.op)},
                      {"ph", "X"},
                      {"ts", start_us},
                      {"dur", std::max(0.0, (r.end - r.start) * 1e6)},
                      {"pid", 0},
                      {"tid", r.rank},
                      {"args", args}});
  }
  nlohmann::json document = {{"traceEvents", events},
                             {"displayTimeUnit", "ms"},
                             {"otherData",
                              {{"schedule", timeline.info.schedule},
                               {"pipeline_size", timeline.info.pipeline_size},
                               {"data_parallel", timeline.info.data_parallel},
                               {"chunks", timeline.info.chunks},
                               {"microbatches", timeline.info.microbatches}}}};
  return document.dump(1) + "\n";
}

TimelineRecorder::TimelineRecorder(const comm::ProcessGrid& grid, const Config& config, const schedule::Schedule& lists,
                                   const std::string& path)
    : grid_(grid), timeout_s_(config.pipeline.recv_timeout_s) {
  if (grid.world_rank != 0) return;
  TimelineInfo info;
  info.ranks = grid.world_size;
  info.pipeline_size = grid.pipeline_size;
  info.data_parallel = grid.data_parallel;
  info.chunks = lists.chunks;
  info.microbatches = lists.microbatches;
  info.schedule = config.pipeline.schedule_file.empty() ? std::string(to_string(config.pipeline.schedule)) : "file";
  writer_ = std::make_unique<TimelineWriter>(path, info);
}

void TimelineRecorder::record(std::int64_t step_index, const std::vector<runtime::TimedAction>& actions) {
  const std::int64_t step = step_number(step_index);
  std::vector<double> packed;
  for (const auto& a : actions)
    packed.insert(packed.end(), {double(step), double(grid_.world_rank), double(int(a.action.op)),
                                 double(a.action.microbatch), double(a.action.chunk), double(a.action.peer), a.start,
                                 a.end, double(a.bytes)});
  const auto all = comm::gatherv(packed, 0, grid_.world,
                                 {timeout_s_, fmt::format("gathering the timeline of step {}", step)});
  if (!writer_) return;
  std::vector<TimelineRow> rows;
  for (std::size_t k = 0; k + packed_interval <= all.size(); k += packed_interval) {
    const double* v = all.data() + k;
    TimelineRow row;
    row.step = std::int64_t(v[0]);
    row.rank = int(v[1]);
    row.action = schedule::Action{schedule::Op(int(v[2])), int(v[3]), int(v[4]), int(v[5])};
    row.start = v[6];
    row.end = v[7];
    row.bytes = std::int64_t(v[8]);
    rows.push_back(row);
  }
  writer_->append(rows);
}

void TimelineRecorder::record(const runtime::StepStats& stats, const std::vector<runtime::TimedAction>& actions) {
  if (writer_)
    writer_->append(
        StepRow{step_number(stats.step), stats.loss, stats.lr, stats.grad_norm, stats.seconds, stats.tokens});
  record(stats.step, actions);
}

}  // namespace kpipe::io
