#include "kpipe/io/timeline.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/clock.hpp"
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
// Rows of the gather that are not actions, by their op: when the rank began the step (start), and a
// checkpoint's work (microbatch: its kind, chunk: the checkpoint's step; start, end, bytes).
constexpr double packed_step_start = -1, packed_checkpoint = -2;

// Each rank's step starts in step order, for placing its checkpoint work.
std::vector<std::map<std::int64_t, double>> starts_by_rank(const TimelineFile& timeline) {
  std::vector<std::map<std::int64_t, double>> starts(std::size_t(timeline.info.ranks));
  for (const auto& s : timeline.starts) starts.at(std::size_t(s.rank))[s.step] = s.seconds;
  return starts;
}

// A checkpoint's work as its tooltip says it: "write of step-00000012 (40.2 MB)".
std::string checkpoint_label(const CheckpointSpan& c) {
  const std::string what = c.kind == CheckpointSpan::Kind::wait ? "waiting for the write" : to_string(c.kind);
  return fmt::format("{} of step-{:08d}{}", what, c.step,
                     c.bytes > 0 ? fmt::format(" ({:.1f} MB)", double(c.bytes) / 1e6) : "");
}

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

const char* to_string(CheckpointSpan::Kind kind) {
  switch (kind) {
    case CheckpointSpan::Kind::snapshot: return "snapshot";
    case CheckpointSpan::Kind::write: return "write";
    case CheckpointSpan::Kind::wait: return "wait";
  }
  return "?";
}

TimelineWriter::TimelineWriter(const std::string& path, const TimelineInfo& info, double write_seconds)
    : path_(path), write_interval_(write_seconds) {
  require_writable(path, fmt::format("output.timeline = '{}'", path));
  const auto hdf5 = h5::exclusive();
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
  write_held();
}

TimelineWriter::~TimelineWriter() {
  const auto hdf5 = h5::exclusive();
  try {
    write_held();
  } catch (const std::exception& e) {  // a destructor reports and goes on: the rows written so far stay
    fmt::print(stderr, "{}: {}: the timeline's last rows were not written: {}\n", program_name(), path_, e.what());
  }
  file_.reset();  // closed under the lock
}

void TimelineWriter::append(const StepRow& row) { pending_steps_.push_back(row); }

void TimelineWriter::append(const std::vector<StepStart>& starts,
                            const std::vector<std::pair<int, CheckpointSpan>>& checkpoints) {
  pending_starts_.insert(pending_starts_.end(), starts.begin(), starts.end());
  pending_checkpoints_.insert(pending_checkpoints_.end(), checkpoints.begin(), checkpoints.end());
}

void TimelineWriter::append(const std::vector<TimelineRow>& rows) {
  pending_rows_.insert(pending_rows_.end(), rows.begin(), rows.end());
  if (std::chrono::steady_clock::now() - written_ >= write_interval_) write_pending();
}

void TimelineWriter::write_pending() {
  const auto hdf5 = h5::exclusive();
  write_held();
}

void TimelineWriter::write_held() {
  write_steps(pending_steps_);
  write_rows(pending_rows_);
  write_beside();
  pending_steps_.clear();
  pending_rows_.clear();
  pending_starts_.clear();
  pending_checkpoints_.clear();
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

void TimelineWriter::write_beside() {
  if (!pending_starts_.empty()) {
    std::vector<std::int64_t> step;
    std::vector<std::int32_t> rank;
    std::vector<double> seconds;
    for (const StepStart& s : pending_starts_) {
      step.push_back(s.step);
      rank.push_back(s.rank);
      seconds.push_back(s.seconds);
    }
    const h5::Handle group = h5::require_group(file_.get(), "step_starts");
    h5::append(group.get(), "step", step);
    h5::append(group.get(), "rank", rank);
    h5::append(group.get(), "seconds", seconds);
  }
  if (!pending_checkpoints_.empty()) {
    std::vector<std::int64_t> step, bytes;
    std::vector<std::int32_t> rank, kind;
    std::vector<double> start, end;
    for (const auto& [r, c] : pending_checkpoints_) {
      rank.push_back(r);
      kind.push_back(int(c.kind));
      step.push_back(c.step);
      start.push_back(c.start);
      end.push_back(c.end);
      bytes.push_back(c.bytes);
    }
    const bool fresh = !h5::exists(file_.get(), "checkpoints");
    const h5::Handle group = h5::require_group(file_.get(), "checkpoints");
    if (fresh) h5::write_attribute(group.get(), "kinds", std::string("snapshot,write,wait"));
    const hid_t g = group.get();
    h5::append(g, "rank", rank);
    h5::append(g, "kind", kind);
    h5::append(g, "step", step);
    h5::append(g, "start", start);
    h5::append(g, "end", end);
    h5::append(g, "bytes", bytes);
  }
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
  if (h5::exists(root, "step_starts")) {
    const h5::Handle starts = h5::open_group(root, "step_starts");
    const std::string where = path + ":/step_starts";
    const auto s_step = h5::read_int64s(starts.get(), "step", where), s_rank = h5::read_int64s(starts.get(), "rank", where);
    const auto s_seconds = h5::read_doubles(starts.get(), "seconds", where);
    require(s_rank.size() == s_step.size() && s_seconds.size() == s_step.size(), "{}: columns of different lengths",
            where);
    for (std::size_t k = 0; k < s_step.size(); ++k) {
      require(s_rank[k] >= 0 && s_rank[k] < t.info.ranks, "{}: row {}: rank = {} outside [0, {})", where, k, s_rank[k],
              t.info.ranks);
      t.starts.push_back({s_step[k], int(s_rank[k]), s_seconds[k]});
    }
  }
  if (h5::exists(root, "checkpoints")) {
    const h5::Handle group = h5::open_group(root, "checkpoints");
    const std::string where = path + ":/checkpoints";
    const hid_t c = group.get();
    const auto c_rank = h5::read_int64s(c, "rank", where), c_kind = h5::read_int64s(c, "kind", where),
               c_step = h5::read_int64s(c, "step", where), c_bytes = h5::read_int64s(c, "bytes", where);
    const auto c_start = h5::read_doubles(c, "start", where), c_end = h5::read_doubles(c, "end", where);
    for (const std::size_t size : {c_kind.size(), c_step.size(), c_bytes.size(), c_start.size(), c_end.size()})
      require(size == c_rank.size(), "{}: columns of different lengths ({} and {})", where, c_rank.size(), size);
    for (std::size_t k = 0; k < c_rank.size(); ++k) {
      require(c_rank[k] >= 0 && c_rank[k] < t.info.ranks, "{}: row {}: rank = {} outside [0, {})", where, k, c_rank[k],
              t.info.ranks);
      require(c_kind[k] >= 0 && c_kind[k] <= int(CheckpointSpan::Kind::wait), "{}: row {}: kind = {} is not one of {}",
              where, k, c_kind[k], "snapshot (0), write (1), wait (2)");
      t.checkpoints.emplace_back(int(c_rank[k]), CheckpointSpan{CheckpointSpan::Kind(c_kind[k]), c_step[k], c_start[k],
                                                                c_end[k], c_bytes[k]});
    }
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

std::vector<std::vector<schedule::SideSpan>> step_checkpoints(const TimelineFile& timeline, std::int64_t step) {
  const auto starts = starts_by_rank(timeline);
  std::vector<std::vector<schedule::SideSpan>> lanes(std::size_t(timeline.info.ranks));
  // Each rank's step, from its start to the next step's (the boundary's work included), or to its last action.
  std::vector<double> last_action(std::size_t(timeline.info.ranks), 0);
  for (const auto& r : timeline.rows)
    if (r.step == step) last_action[std::size_t(r.rank)] = std::max(last_action[std::size_t(r.rank)], r.end);
  for (const auto& [rank, c] : timeline.checkpoints) {
    const auto& mine = starts[std::size_t(rank)];
    const auto at = mine.find(step);
    if (at == mine.end()) continue;
    const auto next = std::next(at);
    const double begin = at->second, end = next == mine.end() ? begin + last_action[std::size_t(rank)] : next->second;
    if (c.start < end && c.end > begin)
      lanes[std::size_t(rank)].push_back(
          {int(c.kind), checkpoint_label(c), std::max(c.start, begin) - begin, std::min(c.end, end) - begin});
  }
  return lanes;
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
  // Checkpoint work, on a track of each rank's own below the ranks': placed by the step it began in (each
  // rank's own step starts), lasting what it lasted.
  const auto starts = starts_by_rank(timeline);
  std::set<int> lanes;
  for (const auto& [rank, c] : timeline.checkpoints) {
    const auto& mine = starts[std::size_t(rank)];
    auto at = mine.end();
    for (auto it = mine.begin(); it != mine.end() && it->second <= c.start; ++it) at = it;
    if (at == mine.end()) at = mine.begin();
    if (at == mine.end()) continue;  // no step start recorded on that rank
    const double start_us = (step_offset[at->first] + std::max(0.0, c.start - at->second)) * 1e6;
    if (lanes.insert(rank).second)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", timeline.info.ranks + rank},
                        {"args", {{"name", fmt::format("rank {} checkpoint", rank)}}}});
    events.push_back({{"name", checkpoint_label(c)},
                      {"cat", "checkpoint"},
                      {"ph", "X"},
                      {"ts", start_us},
                      {"dur", std::max(0.0, (c.end - c.start) * 1e6)},
                      {"pid", 0},
                      {"tid", timeline.info.ranks + rank},
                      {"args", {{"step", at->first}, {"checkpoint_step", c.step}, {"kind", to_string(c.kind)},
                                {"bytes", c.bytes}}}});
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
    : grid_(grid), timeout_s_(config.pipeline.recv_timeout_s), origin_(seconds_now()) {
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

namespace {

std::vector<double> packed_actions(std::int64_t step, int rank, const std::vector<runtime::TimedAction>& actions) {
  std::vector<double> packed;
  for (const auto& a : actions)
    packed.insert(packed.end(), {double(step), double(rank), double(int(a.action.op)), double(a.action.microbatch),
                                 double(a.action.chunk), double(a.action.peer), a.start, a.end, double(a.bytes)});
  return packed;
}

}  // namespace

void TimelineRecorder::record(std::int64_t step_index, const std::vector<runtime::TimedAction>& actions) {
  const std::int64_t step = step_number(step_index);
  gather(step, packed_actions(step, grid_.world_rank, actions));
}

void TimelineRecorder::gather(std::int64_t step, const std::vector<double>& packed) {
  const auto all = comm::gatherv(packed, 0, grid_.world,
                                 {timeout_s_, fmt::format("gathering the timeline of step {}", step)});
  if (!writer_) return;
  std::vector<TimelineRow> rows;
  std::vector<StepStart> starts;
  std::vector<std::pair<int, CheckpointSpan>> checkpoints;
  for (std::size_t k = 0; k + packed_interval <= all.size(); k += packed_interval) {
    const double* v = all.data() + k;
    if (v[2] == packed_step_start) {
      starts.push_back({std::int64_t(v[0]), int(v[1]), v[6]});
      continue;
    }
    if (v[2] == packed_checkpoint) {
      checkpoints.emplace_back(int(v[1]), CheckpointSpan{CheckpointSpan::Kind(int(v[3])), std::int64_t(v[4]), v[6],
                                                         v[7], std::int64_t(v[8])});
      continue;
    }
    TimelineRow row;
    row.step = std::int64_t(v[0]);
    row.rank = int(v[1]);
    row.action = schedule::Action{schedule::Op(int(v[2])), int(v[3]), int(v[4]), int(v[5])};
    row.start = v[6];
    row.end = v[7];
    row.bytes = std::int64_t(v[8]);
    rows.push_back(row);
  }
  writer_->append(starts, checkpoints);
  writer_->append(rows);
}

void TimelineRecorder::record(const runtime::StepStats& stats, const std::vector<runtime::TimedAction>& actions,
                              double began, const std::vector<CheckpointSpan>& checkpoints) {
  const std::int64_t step = step_number(stats.step);
  if (writer_) writer_->append(StepRow{step, stats.loss, stats.lr, stats.grad_norm, stats.seconds, stats.tokens});
  std::vector<double> packed = packed_actions(step, grid_.world_rank, actions);
  const double rank = grid_.world_rank;
  if (began >= 0) packed.insert(packed.end(), {double(step), rank, packed_step_start, 0, 0, 0, began - origin_, 0, 0});
  for (const auto& c : checkpoints)
    packed.insert(packed.end(), {double(step), rank, packed_checkpoint, double(int(c.kind)), double(c.step), 0,
                                 c.start - origin_, c.end - origin_, double(c.bytes)});
  gather(step, packed);
}

}  // namespace kpipe::io
