// kpipe-sim end to end: each subcommand's report against what the library computes for the same input, the SVG
// it writes, --help, and one error line with exit code 2 for bad input and for the spellings it no longer takes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "kpipe/core/config.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/model/kernel_ledger.hpp"
#include "kpipe/planner/costs.hpp"
#include "kpipe/planner/recommend.hpp"
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/routes.hpp"
#include "kpipe/schedule/simulate.hpp"

namespace {

const std::string program = std::string(KPIPE_BINARY_DIR) + "/apps/kpipe-sim";

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr
};

Outcome run(const std::string& arguments) {
  Outcome result;
  FILE* pipe = popen(("'" + program + "' " + arguments + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// printf's text of a figure, as kpipe-sim prints it.
template <class... Args> std::string printed(const char* format, Args... args) {
  char text[256];
  std::snprintf(text, sizeof text, format, args...);
  return text;
}

// The number of lines of an output (each line ends in a newline).
long lines(const std::string& output) { return std::count(output.begin(), output.end(), '\n'); }

class KpipeSim : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream(program)) GTEST_SKIP() << program << " is not built (KPIPE_ENABLE_APPS=OFF?)";
  }
};


// The schedule of a configuration, planned and simulated by the library at the machine's link: what `kpipe-sim
// schedule` with those keys and no --latency or --bandwidth must print.
kpipe::schedule::SimResult simulated(const kpipe::Config& config, kpipe::schedule::Costs costs = {}) {
  const kpipe::planner::Machine machine;
  costs.latency = machine.latency;
  costs.per_byte = 1.0 / machine.bytes_per_second;
  const auto planned = kpipe::schedule::plan(config, kpipe::schedule::planned_delivery(config.pipeline.transport));
  return kpipe::schedule::simulate(planned, std::vector<kpipe::schedule::Costs>(config.pipeline.pipeline_size, costs));
}

TEST_F(KpipeSim, PrintsGanttBubbleMakespanAndStash) {
  const Outcome r = run("schedule --schedule 1f1b --pipeline-size 4 --microbatches 8 --latency 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 3 |.........F0 B0    F1 B1    F2 B2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("makespan 33, bubble 27.3%"), std::string::npos) << r.output;
  // The table after the chart: rank, busy, idle, bubble, steady bubble (a synchronous run's every step), peak
  // stash, weight versions and their bound; 1F1B stashes min(p - s, m) on rank s and holds one version.
  std::istringstream table(r.output.substr(r.output.find("bound\n") + 6));
  for (int rank = 0; rank < 4; ++rank) {
    std::string number, busy, idle, bubble, steady;
    int stash = 0, versions = 0, bound = 0;
    table >> number >> busy >> idle >> bubble >> steady >> stash >> versions >> bound;
    EXPECT_EQ(number, std::to_string(rank));
    EXPECT_EQ(busy + " " + idle + " " + bubble + " " + steady, "24 9 27.3% 27.3%");
    EXPECT_EQ(stash, 4 - rank);
    EXPECT_EQ(versions, 1);
    EXPECT_EQ(bound, 1);
  }
}

// Every kind of schedule: what kpipe-sim schedule prints is the library's plan simulated at the default link
// (the machine's latency and bandwidth: planner::Machine), makespan, bubble and steady step alike.
TEST_F(KpipeSim, ScheduleIsTheLibrarysSimulationAtTheDefaultLink) {
  struct Case {
    const char* arguments;
    kpipe::ScheduleKind kind;
    int stages, microbatches, chunks;
  };
  const Case cases[] = {{"--schedule 1f1b --pipeline-size 4 --microbatches 8", kpipe::ScheduleKind::one_f_one_b, 4, 8, 1},
                        {"--schedule interleaved --pipeline-size 2 --microbatches 4 --chunks 2",
                         kpipe::ScheduleKind::interleaved, 2, 4, 2},
                        {"--schedule pipedream --pipeline-size 3 --microbatches 3", kpipe::ScheduleKind::pipedream, 3, 3, 1},
                        {"--schedule 2bw --pipeline-size 2 --microbatches 4", kpipe::ScheduleKind::two_bw, 2, 4, 1}};
  for (const Case& c : cases) {
    kpipe::Config config;
    config.pipeline.schedule = c.kind;
    config.pipeline.pipeline_size = c.stages;
    config.pipeline.chunks = c.chunks;
    config.train.microbatches = c.microbatches;
    config.train.batch = c.microbatches;
    config.model.n_layers = c.stages * c.chunks;
    const auto sim = simulated(config);
    const Outcome r = run(std::string("schedule --no-gantt ") + c.arguments);
    ASSERT_EQ(r.status, 0) << c.arguments << ": " << r.output;
    EXPECT_NE(r.output.find(printed("makespan %.6g, bubble %.1f%%", sim.makespan, 100 * sim.bubble)), std::string::npos)
        << c.arguments << ": " << r.output;
    EXPECT_NE(r.output.find(printed("steps %d to %d, %.6g per step, bubble %.1f%%", sim.steady_first, sim.steady_last,
                                    sim.steady_step, 100 * sim.steady_bubble)),
              std::string::npos)
        << c.arguments << ": " << r.output;
    EXPECT_NE(r.output.find(printed("latency=%g bandwidth=%g", kpipe::planner::Machine{}.latency,
                                    kpipe::planner::Machine{}.bytes_per_second)),
              std::string::npos)
        << r.output;
  }
}

// Asynchronous schedules: no bubble in the steady state, the versions each rank holds against the bound,
// step boundaries and updates drawn; bad combinations exit 2 with one line.
TEST_F(KpipeSim, PipeDreamHasNoSteadyBubbleAndHoldsPMinusSVersions) {
  const std::string svg = ::testing::TempDir() + "kpipe_sim_pipedream.svg";
  const Outcome r = run("schedule --schedule pipedream --pipeline-size 4 --microbatches 4 --cost-b 2 --cost-step 0.25 "
                        "--latency 0 --svg '" + svg + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("4 micro-batches per step, 5 steps without a flush"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("steady state: steps 2 to 3, 13 per step, bubble 0.0% (pipedream rule)"), std::string::npos)
      << r.output;
  std::istringstream table(r.output.substr(r.output.find("bound\n") + 6));
  for (int rank = 0; rank < 4; ++rank) {
    std::string number, busy, idle, bubble, steady;
    int stash = 0, versions = 0, bound = 0;
    table >> number >> busy >> idle >> bubble >> steady >> stash >> versions >> bound;
    EXPECT_EQ(number, std::to_string(rank));
    EXPECT_EQ(steady, "0.0%");
    EXPECT_EQ(stash, 4 - rank);
    EXPECT_EQ(versions, 4 - rank);
    EXPECT_EQ(bound, 4 - rank);
  }
  std::stringstream drawing;
  drawing << std::ifstream(svg).rdbuf();
  EXPECT_NE(drawing.str().find("U weight update (new version)"), std::string::npos);
  EXPECT_NE(drawing.str().find("step boundary (no flush)"), std::string::npos);
  EXPECT_NE(drawing.str().find("weight versions per rank 4/3/2/1"), std::string::npos);

  const Outcome two = run("schedule --schedule 2bw --pipeline-size 4 --microbatches 4 --no-gantt");
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("bubble 0.0% (2bw rule)"), std::string::npos) << two.output;
}

// Asynchronous replicas run in lock step (each update waits for its stage's replicas' sum): one pipeline whose
// updates also pay the sum's hops, each latency + gradient_bytes / bandwidth = 0.1 s here. Ordered at d = 4:
// 3 hops of the running sum and a broadcast of 2, so U costs 0.25 + 0.5 and a step 4 (1 + 2 + 0.75) = 15;
// allreduce: 4 hops, 14.6.
TEST_F(KpipeSim, AsynchronousReplicasPayTheirSumAtEveryUpdate) {
  const std::string costs = "schedule --schedule pipedream --pipeline-size 4 --microbatches 16 --data-parallel 4 "
                            "--cost-b 2 --cost-step 0.25 --no-gantt --gradient-bytes 1e6 --bandwidth 1e7 --latency 0";
  const Outcome ordered = run(costs);
  ASSERT_EQ(ordered.status, 0) << ordered.output;
  EXPECT_NE(ordered.output.find("x 4 replicas (their sum at every update, ordered"), std::string::npos) << ordered.output;
  EXPECT_NE(ordered.output.find("steady state: steps 2 to 3, 15 per step"), std::string::npos) << ordered.output;
  const Outcome allreduce = run(costs + " --pipeline.dp_reduction allreduce");
  ASSERT_EQ(allreduce.status, 0) << allreduce.output;
  EXPECT_NE(allreduce.output.find("steady state: steps 2 to 3, 14.6 per step"), std::string::npos) << allreduce.output;
}

TEST_F(KpipeSim, AsynchronousBadCombinationsExitTwoWithOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"--schedule 2bw --pipeline-size 4 --microbatches 2",
       "train.microbatches = 2 per pipeline is below pipeline.pipeline_size = 4: 2bw needs at least as many"},
      {"--schedule 1f1b --vertical-sync 1", "pipeline.vertical_sync = 1 needs pipeline.schedule = \"pipedream\""},
      {"--schedule pipedream --vertical-sync 2", "pipeline.vertical_sync = 2: expected 0 or 1"},
      {"--schedule 2bw --split-backward", "--split-backward: asynchronous schedules run whole backwards (B)"},
      {"--schedule pipedream --chunks 2", "pipeline.chunks = 2 needs pipeline.schedule = \"interleaved\" or \"zb-v\""},
      {"--schedule pipedream --data-parallel 2 --microbatches 4 --pipeline.dp_reduction_group 2",
       "pipeline.dp_reduction_group = 2 with the pipedream schedule: asynchronous schedules sum the replicas' "
       "gradients at every update"},
  };
  for (const auto& [arguments, message] : cases) {
    const Outcome r = run(std::string("schedule ") + arguments);
    EXPECT_EQ(r.status, 2) << arguments;
    EXPECT_EQ(r.output.rfind(std::string("kpipe-sim: error: ") + message, 0), 0u) << arguments << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
  }
}

TEST_F(KpipeSim, ReadsPrintsAndDrawsAHandWrittenSchedule) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream out(dir + "kpipe_sim_test.sched");
    out << "# 1F1B on two ranks\nF0 F1 B0 B1 S\nF0 B0 F1 B1 S\n";
  }
  const Outcome r = run("schedule --schedule-file '" + dir + "kpipe_sim_test.sched' --print-schedule --lowered --svg '" +
                        dir + "kpipe_sim_test.svg' --latency 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("ra0<0 F0 B0 sg0>0 ra1<0 F1 B1 sg1>0 S"), std::string::npos) << r.output;
  std::ifstream svg(dir + "kpipe_sim_test.svg");
  std::stringstream contents;
  contents << svg.rdbuf();
  EXPECT_EQ(contents.str().rfind("<svg", 0), 0u);
  EXPECT_NE(contents.str().find("bubble 33.3%"), std::string::npos);
  // Sizes the command line gives must be the file's.
  const Outcome sizes = run("schedule --schedule-file '" + dir + "kpipe_sim_test.sched' --pipeline-size 3");
  EXPECT_EQ(sizes.status, 2) << sizes.output;
  EXPECT_EQ(sizes.output, "kpipe-sim: error: pipeline.pipeline_size = 3: the schedule file has 2 ranks (lines)\n");
  std::remove((dir + "kpipe_sim_test.sched").c_str());
  std::remove((dir + "kpipe_sim_test.svg").c_str());
}

// zb-v runs two chunks per rank, given as kpipe-train takes them.
TEST_F(KpipeSim, ZeroBubbleVTakesTwoChunks) {
  const Outcome r = run("schedule --schedule zb-v --chunks 2 --pipeline-size 4 --microbatches 8 --cost-f 0.5 "
                        "--cost-i 0.5 --cost-w 0.5 --latency 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("schedule zb-v: 4 ranks, 8 micro-batches, 2 chunks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("makespan 25.5, bubble 5.9%"), std::string::npos) << r.output;
  const Outcome one = run("schedule --schedule zb-v --pipeline-size 4 --microbatches 8");
  EXPECT_EQ(one.status, 2) << one.output;
  EXPECT_EQ(one.output, "kpipe-sim: error: pipeline.chunks = 1: schedule 'zb-v' runs two chunks per rank "
                        "(pipeline.chunks = 2)\n");
}

// --transport nccl: the lists NCCL runs (the stream-order pass moved receives) and the passes applied; the
// replicas' sums where the proof puts them.
TEST_F(KpipeSim, PrintsTheListsNcclRunsAndThePasses) {
  const std::string interleaved = "schedule --schedule interleaved --pipeline-size 2 --microbatches 4 --chunks 2 "
                                  "--print-schedule --lowered --no-gantt";
  const Outcome nccl = run(interleaved + " --transport nccl");
  ASSERT_EQ(nccl.status, 0) << nccl.output;
  EXPECT_NE(nccl.output.find("passes: generate interleaved (p = 2, m = 4, v = 2) -> lower -> order_for_streams (4 "
                             "receives moved); "
                             "stream-ordered delivery\n"),
            std::string::npos)
      << nccl.output;
  // Rank 1 receives micro-batch 0's gradient for chunk 0 in the group of its receive of a2, where rank 0's send
  // meets it, before its forward F2.0.
  const std::string moved = "ra2.0<0 rg0.0<0 F2.0 sa2.0>0";
  EXPECT_NE(nccl.output.find(moved), std::string::npos) << nccl.output;
  const Outcome mpi = run(interleaved);
  ASSERT_EQ(mpi.status, 0) << mpi.output;
  EXPECT_NE(mpi.output.find("passes: generate interleaved (p = 2, m = 4, v = 2) -> lower; buffered delivery\n"),
            std::string::npos)
      << mpi.output;
  EXPECT_EQ(mpi.output.find(moved), std::string::npos) << mpi.output;

  const Outcome replicas = run("schedule --schedule 1f1b --pipeline-size 2 --microbatches 4 --data-parallel 2 "
                               "--transport nccl --no-gantt");
  ASSERT_EQ(replicas.status, 0) << replicas.output;
  EXPECT_NE(replicas.output.find("stream-ordered delivery, gradient sums ordered-by-mpi"), std::string::npos)
      << replicas.output;
  // An asynchronous schedule on NCCL: each step receives the activation its last forward pair sent.
  const Outcome pipedream = run("schedule --schedule pipedream --pipeline-size 2 --microbatches 2 --transport nccl "
                                "--print-schedule --lowered --no-gantt");
  ASSERT_EQ(pipedream.status, 0) << pipedream.output;
  EXPECT_NE(pipedream.output.find("U1@2 ra2<0 S"), std::string::npos) << pipedream.output;
  // A training configuration's transport: the lists and memory of what NCCL runs.
  const Outcome memory = run("memory --preset bench --pipeline-size 2 --schedule interleaved --chunks 2 "
                             "--microbatches 8 --transport nccl");
  ASSERT_EQ(memory.status, 0) << memory.output;
  EXPECT_NE(memory.output.find("-> order_for_streams (12 receives moved); stream-ordered delivery"), std::string::npos)
      << memory.output;
}

// kpipe-sim memory: every rank's memory as the memory plan predicts it, and the step the cost model predicts.
TEST_F(KpipeSim, MemoryIsTheMemoryPlansAndTheStepTheCostModels) {
  kpipe::Config config = kpipe::preset("bench");
  config.pipeline.pipeline_size = 2;
  config.pipeline.schedule = kpipe::ScheduleKind::one_f_one_b;
  config.train.microbatches = 8;
  config.memory.recompute = kpipe::Recompute::attention;
  const auto desc = kpipe::model::describe(config.model);
  const auto planned = kpipe::schedule::plan(config, kpipe::schedule::Delivery::buffered);
  const auto ranks = kpipe::memory::plan_ranks(config, desc, planned);
  const auto sim =
      kpipe::schedule::simulate(planned, kpipe::planner::stage_costs(config, desc, planned.run, kpipe::planner::Machine{}));
  const Outcome r = run("memory --preset bench --pipeline-size 2 --schedule 1f1b --microbatches 8 --recompute attention");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(printed("on 2 ranks: predicted step %.4g s, bubble %.1f%%", sim.steady_step,
                                  100 * sim.steady_bubble)),
            std::string::npos)
      << r.output;
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& rank : ranks) {
    EXPECT_NE(r.output.find(printed(" %15.2f\n", double(rank.total()) / (1024.0 * 1024.0))), std::string::npos)
        << rank.world_rank << ": " << r.output;
    EXPECT_NE(r.output.find(printed("rank %d: slots/backward sets per chunk %d/%d", rank.world_rank,
                                    rank.chunks.front().slots, rank.chunks.front().backward_sets)),
              std::string::npos)
        << r.output;
  }
}

// kpipe-sim recommend: the planner's layouts, fastest first, each with its kpipe-train command line; what it
// takes when none fits (exit 1).
TEST_F(KpipeSim, RecommendIsThePlanners) {
  kpipe::planner::Search search;
  search.ranks = 2;
  search.memory_per_rank = 100ll << 20;
  search.top = 3;
  const auto best = kpipe::planner::recommend(kpipe::preset("bench"), search).best;
  const Outcome r = run("recommend --ranks 2 --memory-per-rank 100MiB --preset bench --top 3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("fit in 100 MiB per rank"), std::string::npos) << r.output;
  ASSERT_EQ(best.size(), 3u);
  for (std::size_t k = 0; k < best.size(); ++k)
    EXPECT_NE(r.output.find(printed("%3d %12.4g", int(k) + 1, best[k].step_seconds) + " " +
                            printed("%7.1f%%", 100 * best[k].bubble)),
              std::string::npos)
        << k << ": " << r.output;
  EXPECT_EQ(r.output.find("\n  4 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mpiexec -n 2 kpipe-train --preset bench --pipeline-size "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--memory-limit-per-rank 100MiB"), std::string::npos) << r.output;
  const Outcome none = run("recommend --ranks 1 --memory-per-rank 50MiB --preset bench");
  EXPECT_EQ(none.status, 1) << none.output;
  EXPECT_NE(none.output.find("nothing fits: the leanest layout on 1 ranks needs"), std::string::npos) << none.output;
  EXPECT_NE(none.output.find(" ranks it fits: "), std::string::npos) << none.output;
}

// kpipe-sim kernels: one line per entry of the ledger of the configuration's micro-batch (train.batch /
// train.microbatches sequences), in its order.
TEST_F(KpipeSim, KernelsAreTheLedgersOfTheConfiguredMicroBatch) {
  kpipe::Config config = kpipe::preset("small");
  config.train.microbatches = 2;
  const auto ledger =
      kpipe::model::kernel_ledger(config.model, config.train.batch / config.train.microbatches, config.train.precision);
  const Outcome r = run("kernels --preset small --microbatches 2 --format csv");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines(r.output), long(ledger.entries.size()) + 1) << r.output;
  std::istringstream csv(r.output);
  std::string line;
  std::getline(csv, line);  // the header
  for (const auto& entry : ledger.entries) {
    std::getline(csv, line);
    EXPECT_EQ(line.rfind(std::string(kpipe::model::to_string(entry.pass)) + "," + entry.label + ",", 0), 0u) << line;
  }
  const Outcome table = run("kernels --preset small --microbatches 2");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find(printed("; %d sequences;", ledger.sequences)), std::string::npos) << table.output;
}

double makespan(const std::string& output) {
  const auto at = output.find("makespan ");
  return at == std::string::npos ? -1 : std::stod(output.substr(at + 9));
}

TEST_F(KpipeSim, CostsFromAModelFollowItsVocabulary) {
  // The small preset on 2 stages: with bytes the balanced partition splits the blocks evenly; with a BPE
  // vocabulary of 8192 the LM head takes a stage of its own, and the uniform partition (two blocks beside
  // the head) is predicted far slower than the balanced one.
  const std::string base = "schedule --schedule 1f1b --pipeline-size 2 --microbatches 4 --preset small --batch 16 "
                           "--no-gantt";
  const Outcome bytes = run(base + " --pipeline.partition balanced --model.vocab 256");
  ASSERT_EQ(bytes.status, 0) << bytes.output;
  EXPECT_NE(bytes.output.find("0      0     0-2"), std::string::npos) << bytes.output;
  EXPECT_NE(bytes.output.find("1      1     3-5"), std::string::npos) << bytes.output;
  const Outcome bpe = run(base + " --pipeline.partition balanced --model.vocab 8192");
  ASSERT_EQ(bpe.status, 0) << bpe.output;
  EXPECT_NE(bpe.output.find("0      0     0-4"), std::string::npos) << bpe.output;
  EXPECT_NE(bpe.output.find("1      1     5-5"), std::string::npos) << bpe.output;
  // kpipe-train's default partition is kpipe-sim's.
  const Outcome uniform = run(base + " --model.vocab 8192");
  ASSERT_EQ(uniform.status, 0) << uniform.output;
  EXPECT_EQ(kpipe::to_string(kpipe::Config{}.pipeline.partition), "uniform");
  EXPECT_NE(uniform.output.find("uniform partition"), std::string::npos) << uniform.output;
  EXPECT_GT(makespan(uniform.output), 1.2 * makespan(bpe.output)) << uniform.output << bpe.output;
  EXPECT_GT(makespan(bpe.output), 1.5 * makespan(bytes.output)) << "the head's FLOPs count";
  // Recomputation is priced by the same cost model: every block's recomputed forward, paid before its backward.
  const Outcome block = run(base + " --pipeline.partition balanced --model.vocab 256 --recompute block");
  ASSERT_EQ(block.status, 0) << block.output;
  EXPECT_NE(block.output.find("recompute block"), std::string::npos) << block.output;
  EXPECT_GT(makespan(block.output), 1.1 * makespan(bytes.output)) << block.output;
  EXPECT_LT(makespan(block.output), 1.5 * makespan(bytes.output)) << block.output;
}

TEST_F(KpipeSim, BadInputIsOneLineAndExitCodeTwo) {
  for (const char* arguments :
       {"schedule --schedule zigzag", "schedule --schedule interleaved --chunks 2 --microbatches 6 --pipeline-size 4",
        "schedule --pipeline-size 0", "schedule --cost-b -2", "schedule --no-such-option",
        "schedule --schedule-file /nonexistent/x", "schedule --preset small --cost-f 2", "schedule --gpu h100",
        "recommend --ranks 2 --memory-per-rank lots", "recommend --memory-per-rank 1GiB",
        "memory --model.d_model 250", "memory --gpu a100", "schedule --preset huge",
        "schedule --preset small --pipeline.partition greedy", "schedule --preset small --recompute everything",
        "schedule --transport carrier-pigeon", "kernels --format xml", "kernels --gpu a100", "schedule extra",
        "plan", ""}) {
    const Outcome r = run(arguments);
    EXPECT_EQ(r.status, 2) << arguments;
    EXPECT_EQ(r.output.rfind("kpipe-sim: error: ", 0), 0u) << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
  }
  EXPECT_EQ(run("schedule --schedule interleaved --chunks 2 --microbatches 6 --pipeline-size 4").output,
            "kpipe-sim: error: train.microbatches = 6: the interleaved schedule needs a multiple of "
            "pipeline.pipeline_size = 4\n");
}

// A key's bad value is named with the key and the value, in every subcommand, as kpipe-train names it.
TEST_F(KpipeSim, ABadKeyValueNamesTheKeyAndTheValue) {
  const std::pair<const char*, const char*> cases[] = {
      {"schedule --pipeline.pipeline_size x", "kpipe-sim: error: --pipeline.pipeline_size = x: expected an integer\n"},
      {"memory --pipeline.schedule zigzag", "kpipe-sim: error: --pipeline.schedule = zigzag: expected one of "},
      {"recommend --ranks 2 --memory-per-rank 1GiB --train.precision fp64",
       "kpipe-sim: error: --train.precision = fp64: expected one of "},
      {"kernels --model.n_heads 5", "kpipe-sim: error: model.d_model = 64 is not divisible by model.n_heads = 5"},
  };
  for (const auto& [arguments, message] : cases) {
    const Outcome r = run(arguments);
    EXPECT_EQ(r.status, 2) << arguments;
    EXPECT_EQ(r.output.rfind(message, 0), 0u) << arguments << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
  }
}

// kpipe-sim --help lists the four subcommands, one line each; each subcommand's --help its own options and
// kpipe-train's keys.
TEST_F(KpipeSim, HelpListsTheSubcommandsAndEachItsOptions) {
  const Outcome help = run("--help");
  ASSERT_EQ(help.status, 0) << help.output;
  for (const char* sub : {"schedule", "memory", "recommend", "kernels"})
    EXPECT_NE(help.output.find(std::string("\n  ") + sub + " "), std::string::npos) << sub << ": " << help.output;
  const std::pair<const char*, std::vector<const char*>> own[] = {
      {"schedule", {"--cost-f", "--svg", "--print-schedule", "--latency", "--bandwidth"}},
      {"memory", {"--latency", "--bandwidth", "--gpu", "--profile"}},
      {"recommend", {"--ranks", "--memory-per-rank", "--top", "--latency", "--bandwidth"}},
      {"kernels", {"--gpu", "--format"}},
  };
  for (const auto& [sub, options] : own) {
    const Outcome r = run(std::string(sub) + " --help");
    ASSERT_EQ(r.status, 0) << sub << ": " << r.output;
    EXPECT_NE(r.output.find(std::string("Usage: kpipe-sim ") + sub), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--pipeline.pipeline_size"), std::string::npos) << r.output;
    for (const char* option : options) EXPECT_NE(r.output.find(option), std::string::npos) << sub << " " << option;
  }
  EXPECT_EQ(run("memory --help").output.find("--cost-f"), std::string::npos);
  EXPECT_EQ(run("kernels --help").output.find("--latency"), std::string::npos);
}

// One link, one default: every subcommand that prices messages defaults them to the cost model's machine.
TEST_F(KpipeSim, EverySubcommandDefaultsTheLinkAlike) {
  const kpipe::planner::Machine machine;
  const std::string latency = printed("--latency FLOAT=%g ", machine.latency),
                    bandwidth = printed("--bandwidth FLOAT=%g ", machine.bytes_per_second);
  for (const char* sub : {"schedule", "memory", "recommend"}) {
    const Outcome r = run(std::string(sub) + " --help");
    EXPECT_NE(r.output.find(latency), std::string::npos) << sub << ": " << r.output;
    EXPECT_NE(r.output.find(bandwidth), std::string::npos) << sub << ": " << r.output;
  }
  // And the default is what the simulation uses: a message of 1e10 bytes costs 1 s more than one of none.
  const std::string base = "schedule --schedule gpipe --pipeline-size 2 --microbatches 1 --no-gantt";
  EXPECT_NEAR(makespan(run(base + " --activation-bytes 1e10").output) - makespan(run(base).output),
              2 * 1e10 / machine.bytes_per_second, 1e-3);
}

// The spellings kpipe-sim no longer takes (the modes' flags, schedule mode's own names of kpipe-train's keys)
// are answered, before any work, with one line naming the one it takes now, and exit code 2.
TEST_F(KpipeSim, OldSpellingsNameTheNewOnes) {
  const std::pair<const char*, const char*> cases[] = {
      {"--recommend --ranks 2 --memory-per-rank 1GiB", "--recommend is a subcommand now: kpipe-sim recommend"},
      {"--memory --preset bench", "--memory is a subcommand now: kpipe-sim memory"},
      {"--kernels --gpu h200", "--kernels is a subcommand now: kpipe-sim kernels"},
      {"--schedule 1f1b --stages 4", "--stages is --pipeline-size now"},
      {"schedule --stages 4", "--stages is --pipeline-size now"},
      {"schedule --replicas 2", "--replicas is --data-parallel now"},
      {"schedule --dp-group 2", "--dp-group is --pipeline.dp_reduction_group now"},
      {"schedule --allreduce", "--allreduce is --pipeline.dp_reduction allreduce now"},
      {"schedule --preset small --partition balanced", "--partition is --pipeline.partition now"},
      {"schedule --preset small --vocab 8192", "--vocab is --model.vocab now"},
      {"kernels --sequences 4", "--sequences is --batch now"},
      {"schedule --per-byte 1e-9", "--per-byte is --bandwidth now, in bytes per second"},
      {"recommend --per-byte=1e-9", "--per-byte is --bandwidth now, in bytes per second"},
      {"schedule --schedule pipedream --vertical-sync", "--vertical-sync takes a value, as kpipe-train's"},
      {"schedule --schedule pipedream --vertical-sync --steps 5", "--vertical-sync takes a value, as kpipe-train's"},
  };
  for (const auto& [arguments, message] : cases) {
    const std::string svg = ::testing::TempDir() + "kpipe_sim_old.svg";
    std::remove(svg.c_str());
    const Outcome r = run(std::string(arguments) + " --svg '" + svg + "'");
    EXPECT_EQ(r.status, 2) << arguments;
    EXPECT_EQ(r.output.rfind(std::string("kpipe-sim: error: ") + message, 0), 0u) << arguments << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
    EXPECT_FALSE(std::ifstream(svg)) << arguments << ": work was done";
  }
}

}  // namespace
