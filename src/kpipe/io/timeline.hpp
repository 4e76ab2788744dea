#pragma once
// Timelines: every action each rank ran in each step (kind, micro-batch, chunk, peer, start, end, bytes
// moved), when each rank began each step, and each rank's checkpoint work (snapshot, write, wait), gathered on
// rank 0 after every step and appended to one HDF5 file as tables of columns (layout in docs/traces.md). Read
// back, a timeline gives the measured bubble per rank, the Gantt/SVG pictures that kpipe-sim draws
// (schedule/render.hpp, the checkpoint work in a lane of its own) and a Chrome trace-event file for Perfetto.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/runtime/step_stats.hpp"
#include "kpipe/schedule/render.hpp"

namespace kpipe::io {

inline constexpr const char* timeline_format = "kpipe-timeline";  // the root attribute "format" of the file

struct TimelineRow {
  std::int64_t step = 0;     // numbered from 1 (core/step_number.hpp)
  int rank = 0;              // world rank
  schedule::Action action;   // micro-batch and chunk as in the rank's schedule (local to its replica)
  double start = 0, end = 0; // seconds since the rank began the step
  std::int64_t bytes = 0;    // moved by a send or receive, 0 for compute
};

// A checkpoint's work on one rank: the copy into the snapshot buffer and a wait for the write still in flight
// (on the training's thread), and the write itself (beside the training, or while it waits).
struct CheckpointSpan {
  enum class Kind : int { snapshot = 0, write = 1, wait = 2 };
  Kind kind = Kind::write;
  std::int64_t step = 0;     // the checkpoint's
  double start = 0, end = 0; // recording: seconds_now(); in a TimelineFile: seconds since the rank's timeline began
  std::int64_t bytes = 0;    // this rank's share of the checkpoint
};
const char* to_string(CheckpointSpan::Kind kind);  // "snapshot", "write", "wait"

// When a rank began a step: seconds since the rank's timeline began.
struct StepStart {
  std::int64_t step = 0;
  int rank = 0;
  double seconds = 0;
};

struct TimelineInfo {
  int ranks = 1;           // world size
  int pipeline_size = 1;
  int data_parallel = 1;
  int chunks = 1;
  int microbatches = 1;    // per replica
  std::string schedule;    // name, or "file" for a hand-written schedule
};

// One optimizer step as the run saw it (the /steps table, beside the actions): for loss curves.
struct StepRow {
  std::int64_t step = 0;  // numbered from 1
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
  std::int64_t tokens = 0;
};

// The HDF5 file, written by one process (no MPI here).
class TimelineWriter {
 public:
  // Rows are held and written (then the file flushed) at most every `write_seconds` (0: at every append of
  // actions), and when the writer closes: each write compresses and checksums the chunks it touches, which
  // after every step cost rank 0 milliseconds that the other ranks then waited for in their next step.
  TimelineWriter(const std::string& path, const TimelineInfo& info, double write_seconds = 1.0);
  ~TimelineWriter();
  TimelineWriter(const TimelineWriter&) = delete;
  TimelineWriter& operator=(const TimelineWriter&) = delete;
  void append(const std::vector<TimelineRow>& rows);
  void append(const StepRow& row);  // written with the next actions written
  // Written with the next actions written.
  void append(const std::vector<StepStart>& starts, const std::vector<std::pair<int, CheckpointSpan>>& checkpoints);

 private:
  void write_pending();
  void write_held();  // write_pending() with h5::exclusive() held
  void write_steps(const std::vector<StepRow>& rows);
  void write_rows(const std::vector<TimelineRow>& rows);
  void write_beside();  // the step starts and the checkpoint work held

  std::string path_;
  h5::Handle file_;
  std::chrono::duration<double> write_interval_;
  std::chrono::steady_clock::time_point written_{};  // the last write
  std::vector<StepRow> pending_steps_;
  std::vector<TimelineRow> pending_rows_;
  std::vector<StepStart> pending_starts_;
  std::vector<std::pair<int, CheckpointSpan>> pending_checkpoints_;  // (world rank, its work)
};

struct TimelineFile {
  TimelineInfo info;
  std::vector<TimelineRow> rows;  // in the order written: step by step, rank by rank, action by action
  std::vector<StepStart> starts;  // (none in a timeline of an older kpipe)
  std::vector<std::pair<int, CheckpointSpan>> checkpoints;  // (world rank, its work)
};

// Reads a timeline; InputError naming the file and what is wrong with it.
TimelineFile read_timeline(const std::string& path);

std::vector<std::int64_t> timeline_steps(const TimelineFile& timeline);  // ascending, distinct
// One step's compute actions per rank, for schedule::gantt_text / timeline_svg.
schedule::Timeline step_timeline(const TimelineFile& timeline, std::int64_t step);
// Per world rank, the checkpoint work that overlaps step `step` (from its start to the next step's on that
// rank, the boundary's work included), clipped to it, in seconds since the rank began the step, for
// schedule::timeline_svg's side lanes.
std::vector<std::vector<schedule::SideSpan>> step_checkpoints(const TimelineFile& timeline, std::int64_t step);
// Per world rank: the measured bubble (schedule/bubble.hpp, the figure kpipe-train prints) over the steps after
// the first (the only step when there is one), against the makespan of the rank's own pipeline.
std::vector<double> measured_bubble(const TimelineFile& timeline);
// Chrome trace-event JSON (Perfetto, chrome://tracing): one complete event ("ph": "X") per action, one
// track per rank, steps laid end to end (each step starts where the slowest rank ended the previous one); a
// rank's checkpoint work on a track of its own ("rank 0 checkpoint"), placed by the step it falls in.
std::string chrome_trace(const TimelineFile& timeline);

// Records a run's timeline after every step: construct and call record() on every rank of the world.
class TimelineRecorder {
 public:
  // `lists`: the schedule the run executes (its chunks and micro-batches per step).
  TimelineRecorder(const comm::ProcessGrid& grid, const Config& config, const schedule::Schedule& lists,
                   const std::string& path);
  // Collective over the world: rank 0 appends every rank's actions of the step of index `step_index` (from 0, as
  // the trainer counts; the file numbers it step_number(step_index)).
  void record(std::int64_t step_index, const std::vector<runtime::TimedAction>& actions);
  // The same, and rank 0 appends the step's loss, learning rate, gradient norm, time and tokens to /steps;
  // with when this rank began the step (seconds_now(): the trainer's record().timeline_origin) and this rank's
  // checkpoint work since the last record.
  void record(const runtime::StepStats& stats, const std::vector<runtime::TimedAction>& actions, double began = -1,
              const std::vector<CheckpointSpan>& checkpoints = {});

 private:
  void gather(std::int64_t step, const std::vector<double>& packed);  // every rank's rows to rank 0's file

  comm::ProcessGrid grid_;
  double timeout_s_;  // bound of the gather (pipeline.recv_timeout_s)
  double origin_;     // seconds_now() when this rank's timeline began
  std::unique_ptr<TimelineWriter> writer_;  // rank 0 only
};

}  // namespace kpipe::io
