// Timelines: file round trip, growth per step, measured bubble, Chrome trace JSON, and a real one-rank run
// whose every action is in the file (the two-rank run is tests/e2e/inspect.sh).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <nlohmann/json.hpp>

#include "data/temp_dir.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/io/timeline.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "support/tiny_config.hpp"

namespace kpipe {
namespace {

using schedule::Action;
using schedule::Op;

io::TimelineRow row(std::int64_t step, int rank, Op op, int mb, double start, double end, std::int64_t bytes = 0,
                    int peer = -1) {
  io::TimelineRow r;
  r.step = step;
  r.rank = rank;
  r.action = Action{op, mb, 0, peer};
  r.start = start;
  r.end = end;
  r.bytes = bytes;
  return r;
}

io::TimelineInfo two_ranks() {
  io::TimelineInfo info;
  info.ranks = 2;
  info.pipeline_size = 2;
  info.microbatches = 1;
  info.schedule = "1f1b";
  return info;
}

// Two steps on two ranks: rank 0 busy 2 of 4 s in step 1, rank 1 busy 3 of 4 s.
std::vector<io::TimelineRow> step_rows(std::int64_t step) {
  return {row(step, 0, Op::forward, 0, 0, 1), row(step, 0, Op::send_activation, 0, 1, 1, 64, 1),
          row(step, 0, Op::recv_gradient, 0, 1, 3, 64, 1), row(step, 0, Op::backward, 0, 3, 4),
          row(step, 1, Op::recv_activation, 0, 0, 1, 64, 0), row(step, 1, Op::forward, 0, 1, 2),
          row(step, 1, Op::backward, 0, 2, 4), row(step, 1, Op::send_gradient, 0, 4, 4, 64, 0)};
}

TEST(Timeline, RoundTripGrowingStepByStep) {
  test::TempDir dir;
  const auto path = dir.path("t.h5");
  {
    io::TimelineWriter writer(path, two_ranks(), 0);  // written at every step
    writer.append(step_rows(1));
    EXPECT_EQ(io::read_timeline(path).rows.size(), 8u);
    writer.append(step_rows(2));
  }
  const auto t = io::read_timeline(path);
  EXPECT_EQ(t.info.ranks, 2);
  EXPECT_EQ(t.info.schedule, "1f1b");
  ASSERT_EQ(t.rows.size(), 16u);
  const auto want = step_rows(2);
  for (std::size_t k = 0; k < want.size(); ++k) {
    const auto& got = t.rows[8 + k];
    EXPECT_EQ(got.step, 2);
    EXPECT_EQ(got.rank, want[k].rank);
    EXPECT_EQ(got.action, want[k].action);
    EXPECT_EQ(got.start, want[k].start);
    EXPECT_EQ(got.end, want[k].end);
    EXPECT_EQ(got.bytes, want[k].bytes);
  }
  EXPECT_EQ(io::timeline_steps(t), (std::vector<std::int64_t>{1, 2}));
  const auto spans = io::step_timeline(t, 2);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].size(), 2u);  // F and B: messages are not drawn
}

// Timelines of format_version 1 numbered steps from 0: read, they are numbered from 1 like every other step.
TEST(Timeline, AVersionOneFileIsReadWithStepsFromOne) {
  test::TempDir dir;
  const auto path = dir.path("old.h5");
  {
    io::TimelineWriter writer(path, two_ranks(), 0);
    writer.append(step_rows(0));
    writer.append(step_rows(1));
  }
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const std::int64_t one = 1;
    const hid_t attribute = H5Aopen(file, "format_version", H5P_DEFAULT);
    H5Awrite(attribute, H5T_NATIVE_INT64, &one);
    H5Aclose(attribute);
    H5Fclose(file);
  }
  EXPECT_EQ(io::timeline_steps(io::read_timeline(path)), (std::vector<std::int64_t>{1, 2}));
}

// An asynchronous run's timeline: its updates (U, op 11) are read and drawn beside the compute.
TEST(Timeline, AnAsynchronousRunsUpdatesAreReadAndDrawn) {
  test::TempDir dir;
  const auto path = dir.path("async.h5");
  auto rows = step_rows(1);
  rows.push_back(row(1, 0, Op::update, 0, 4, 5));
  {
    io::TimelineWriter writer(path, two_ranks(), 0);
    writer.append(rows);
  }
  const auto spans = io::step_timeline(io::read_timeline(path), 1);
  ASSERT_EQ(spans[0].size(), 3u);  // F, B, U
  EXPECT_EQ(spans[0].back().action.op, Op::update);
}

TEST(Timeline, MeasuredBubblePerRank) {
  io::TimelineFile t;
  t.info = two_ranks();
  t.rows = step_rows(0);
  const auto later = step_rows(1);
  t.rows.insert(t.rows.end(), later.begin(), later.end());
  t.rows[3].end = 10;  // step 0 of rank 0 slow: skipped as the first step
  const auto bubble = io::measured_bubble(t);
  ASSERT_EQ(bubble.size(), 2u);
  EXPECT_DOUBLE_EQ(bubble[0], 0.5);   // busy 2 of 4
  EXPECT_DOUBLE_EQ(bubble[1], 0.25);  // busy 3 of 4
}

// A rank that ends its step early still waits for the pipeline's last action: its idle time counts against the
// longest rank's span, as the simulator counts it against the makespan (schedule/bubble.hpp).
TEST(Timeline, MeasuredBubbleAgainstTheLongestRank) {
  io::TimelineFile t;
  t.info = two_ranks();
  t.rows = step_rows(0);
  const auto later = step_rows(1);
  t.rows.insert(t.rows.end(), later.begin(), later.end());
  t.rows[14] = row(1, 1, Op::backward, 0, 2, 3);  // rank 1's backward of step 1 takes 1 s, its send ends at 3
  t.rows[15] = row(1, 1, Op::send_gradient, 0, 3, 3, 64, 0);
  const auto bubble = io::measured_bubble(t);
  ASSERT_EQ(bubble.size(), 2u);
  EXPECT_DOUBLE_EQ(bubble[0], 0.5);  // busy 2 of 4
  EXPECT_DOUBLE_EQ(bubble[1], 0.5);  // busy 2 of rank 0's 4, not of its own 3
}

TEST(Timeline, ChromeTraceHasOneEventPerAction) {
  io::TimelineFile t;
  t.info = two_ranks();
  t.rows = step_rows(0);
  const auto later = step_rows(1);
  t.rows.insert(t.rows.end(), later.begin(), later.end());
  const auto json = nlohmann::json::parse(io::chrome_trace(t));
  int compute = 0, messages = 0;
  double last_step_start = 0;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const std::string cat = e.at("cat");
    if (cat == "message") {
      ++messages;
      EXPECT_EQ(e.at("args").at("bytes"), 64);
    } else {
      ++compute;
    }
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    if (e.at("args").at("step") == 1 && e.at("name") == "F0" && e.at("tid") == 0) last_step_start = e.at("ts");
  }
  EXPECT_EQ(compute, 8);
  EXPECT_EQ(messages, 8);
  EXPECT_DOUBLE_EQ(last_step_start, 4e6);  // step 1 starts where step 0 ended (4 s)
}

// Checkpoint work in a lane of its own: step starts and spans round-trip through the file; the SVG of a step
// shows the work that overlaps it (the boundary's snapshot included, a write clipped to the step), the Chrome
// trace puts it on a track per rank, placed by the step it began in.
TEST(Timeline, CheckpointWorkHasALaneOfItsOwn) {
  using Kind = io::CheckpointSpan::Kind;
  test::TempDir dir;
  const auto path = dir.path("t.h5");
  {
    io::TimelineWriter writer(path, two_ranks(), 0);  // written at every append of actions: twice here
    writer.append({{0, 0, 10.0}, {0, 1, 10.5}}, {{0, {Kind::snapshot, 1, 14.0, 14.5, 1000}}});
    writer.append(step_rows(0));
    writer.append({{1, 0, 15.0}, {1, 1, 15.5}},
                  {{0, {Kind::write, 1, 14.5, 17.0, 1000}}, {1, {Kind::wait, 1, 14.8, 15.2, 0}}});
    writer.append(step_rows(1));
  }
  const auto t = io::read_timeline(path);
  ASSERT_EQ(t.starts.size(), 4u);
  EXPECT_EQ(t.starts[3].step, 1);
  EXPECT_EQ(t.starts[3].rank, 1);
  EXPECT_EQ(t.starts[3].seconds, 15.5);
  ASSERT_EQ(t.checkpoints.size(), 3u);
  EXPECT_EQ(t.checkpoints[1].first, 0);
  EXPECT_EQ(t.checkpoints[1].second.kind, Kind::write);
  EXPECT_EQ(t.checkpoints[1].second.bytes, 1000);
  // Step 0 on rank 0 runs from 10 to 15: the snapshot at 4 s, the write from 4.5 s clipped at 5 s.
  const auto lanes0 = io::step_checkpoints(t, 0);
  ASSERT_EQ(lanes0.size(), 2u);
  ASSERT_EQ(lanes0[0].size(), 2u);
  EXPECT_DOUBLE_EQ(lanes0[0][0].start, 4.0);
  EXPECT_DOUBLE_EQ(lanes0[0][1].start, 4.5);
  EXPECT_DOUBLE_EQ(lanes0[0][1].end, 5.0);
  ASSERT_EQ(lanes0[1].size(), 1u);  // rank 1's wait from 4.3 s (step 0 began at 10.5), to 4.7 s
  EXPECT_NEAR(lanes0[1][0].end, 4.7, 1e-12);
  // Step 1 (the last: up to each rank's last action, 4 s): the rest of the write, 0 to 2 s.
  const auto lanes1 = io::step_checkpoints(t, 1);
  ASSERT_EQ(lanes1[0].size(), 1u);
  EXPECT_DOUBLE_EQ(lanes1[0][0].start, 0.0);
  EXPECT_DOUBLE_EQ(lanes1[0][0].end, 2.0);
  schedule::SvgOptions options;
  options.side = lanes0;
  options.side_kinds = {"snapshot", "write", "wait"};
  const std::string svg = schedule::timeline_svg(io::step_timeline(t, 0), 1, options);
  EXPECT_NE(svg.find("snapshot of step-00000001 (0.0 MB) rank 0: 4 to 4.5"), std::string::npos) << svg;
  EXPECT_NE(svg.find("waiting for the write of step-00000001 rank 1"), std::string::npos);
  // Chrome: step 0 lasts 4 s on the layout; rank 0's snapshot at 4 s into step 0, its own track.
  int events = 0;
  const auto json = nlohmann::json::parse(io::chrome_trace(t));
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") != "checkpoint") continue;
    ++events;
    EXPECT_EQ(e.at("tid"), 2 + t.checkpoints[std::size_t(events - 1)].first);
    if (e.at("args").at("kind") == "snapshot") {
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 4e6);
    }
    if (e.at("args").at("kind") == "write") {
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 2.5e6);
    }
  }
  EXPECT_EQ(events, 3);
}

TEST(Timeline, BadFilesAreInputErrors) {
  test::TempDir dir;
  EXPECT_THROW(io::read_timeline(dir.path("none.h5")), InputError);
  EXPECT_THROW(io::read_timeline(dir.write("x.h5", "not hdf5")), InputError);
}

TEST(TimelineRecorder, EveryActionOfAOneRankRunInOrder) {
  test::TempDir dir;
  const Config c = test::tiny_config(Config().train.steps);
  static const data::Corpus corpus = data::synthetic_corpus(5, 20000, 0.1);
  const auto path = dir.path("run.h5");
  auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
  std::vector<Action> want;
  {
    runtime::Trainer<float> trainer(c, corpus, grid);
    io::TimelineRecorder recorder(grid, c, trainer.plan().lists(), path);
    for (int s = 0; s < 2; ++s) {
      trainer.step();
      recorder.record(s, trainer.record().timeline);
    }
    for (const Action& a : trainer.plan().lists().actions[0])
      if (a.op != Op::step) want.push_back(a);
  }
  comm::free_grid(grid);
  const auto t = io::read_timeline(path);
  ASSERT_EQ(t.rows.size(), 2 * want.size());
  for (std::size_t k = 0; k < t.rows.size(); ++k) {
    EXPECT_EQ(t.rows[k].action, want[k % want.size()]) << k;
    EXPECT_EQ(t.rows[k].step, std::int64_t(k / want.size()) + 1);  // steps numbered from 1
    EXPECT_LE(t.rows[k].start, t.rows[k].end);
    EXPECT_GE(t.rows[k].start, 0.0);
  }
}

}  // namespace
}  // namespace kpipe
