// The metrics file: one JSON object a line, each of one kind (a step's, a periodic validation's, a checkpoint's,
// the final one), every step numbered as everywhere else (from 1: core/step_number.hpp).
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/runtime/metrics.hpp"

namespace kpipe::runtime {
namespace {

std::vector<nlohmann::json> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(Metrics, EveryRecordKindWithStepsNumberedFromOne) {
  test::TempDir dir;
  const std::string path = dir.path("run.jsonl");
  {
    MetricsWriter metrics(path);
    StepStats first;  // the run's first step: index 0
    first.step = 0;
    first.loss = 5.5;
    first.tokens = 512;
    first.seconds = 0.5;
    metrics.write_step(first);
    StepStats skipped = first;
    skipped.step = 1;
    skipped.loss = std::numeric_limits<double>::quiet_NaN();
    skipped.skipped = true;
    metrics.write_step(skipped);
    metrics.write_validation(2, 5.25);
    metrics.write_checkpoint(2, "ck/step-00000002.h5", 0.125);
    FinalMetrics final;
    final.steps = 2;
    final.skipped_steps = 1;
    metrics.write_final(final);
  }
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].at("step"), 1);  // the first step is step 1, as in the progress lines
  EXPECT_EQ(lines[0].at("loss"), 5.5);
  EXPECT_EQ(lines[0].at("tokens_per_s"), 1024.0);
  EXPECT_EQ(lines[1].at("step"), 2);
  EXPECT_TRUE(lines[1].at("skipped"));
  EXPECT_TRUE(lines[1].at("loss").is_null());
  EXPECT_EQ(lines[2], nlohmann::json({{"validation", true}, {"step", 2}, {"val_loss", 5.25}}));
  EXPECT_EQ(lines[3], nlohmann::json({{"checkpoint", "ck/step-00000002.h5"}, {"step", 2}, {"seconds", 0.125}}));
  EXPECT_TRUE(lines[4].at("final"));
  EXPECT_EQ(lines[4].at("steps"), 2);  // after step 2, 2 steps: the checkpoint's step too
  EXPECT_EQ(lines[4].at("skipped_steps"), 1);
  // A reader tells the kinds apart by their keys: only a step's line has step_seconds.
  int step_lines = 0;
  for (const auto& line : lines) step_lines += line.contains("step_seconds") ? 1 : 0;
  EXPECT_EQ(step_lines, 2);
}

TEST(Metrics, NoPathWritesNothing) {
  MetricsWriter metrics("");
  metrics.write_validation(1, 1.0);
  metrics.write_checkpoint(1, "x", 1.0);
  SUCCEED();
}

}  // namespace
}  // namespace kpipe::runtime
