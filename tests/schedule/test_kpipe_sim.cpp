// kpipe-sim end to end: the report it prints, the SVG it writes, and one error line with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "kpipe/core/config.hpp"

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

class KpipeSim : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream(program)) GTEST_SKIP() << program << " is not built (KPIPE_ENABLE_APPS=OFF?)";
  }
};

TEST_F(KpipeSim, PrintsGanttBubbleMakespanAndStash) {
  const Outcome r = run("--schedule 1f1b --stages 4 --microbatches 8");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 3 |.........F0 B0    F1 B1    F2 B2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("makespan 33, bubble 27.3%"), std::string::npos) << r.output;
  // The table after the chart: rank, busy, idle, bubble, peak stash; 1F1B stashes min(p - s, m) on rank s.
  std::istringstream table(r.output.substr(r.output.find("peak stash\n") + 11));
  for (int rank = 0; rank < 4; ++rank) {
    std::string number, busy, idle, bubble;
    int stash = 0;
    table >> number >> busy >> idle >> bubble >> stash;
    EXPECT_EQ(number, std::to_string(rank));
    EXPECT_EQ(busy + " " + idle + " " + bubble, "24 9 27.3%");
    EXPECT_EQ(stash, 4 - rank);
  }
}

// Asynchronous schedules: no bubble in the steady state, the versions each rank holds against the theory,
// step boundaries and updates drawn; bad combinations exit 2 with one line.
TEST_F(KpipeSim, PipeDreamHasNoSteadyBubbleAndHoldsPMinusSVersions) {
  const std::string svg = ::testing::TempDir() + "kpipe_sim_pipedream.svg";
  const Outcome r = run("--schedule pipedream --stages 4 --microbatches 4 --cost-b 2 --cost-step 0.25 --svg '" + svg + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("4 micro-batches per step, 5 steps without a flush"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("steady state: steps 2 to 3, 13 per step, bubble 0.0%"), std::string::npos) << r.output;
  std::istringstream table(r.output.substr(r.output.find("theory\n") + 7));
  for (int rank = 0; rank < 4; ++rank) {
    std::string number, busy, idle, bubble, steady;
    int stash = 0, versions = 0, theory = 0;
    table >> number >> busy >> idle >> bubble >> steady >> stash >> versions >> theory;
    EXPECT_EQ(number, std::to_string(rank));
    EXPECT_EQ(steady, "0.0%");
    EXPECT_EQ(stash, 4 - rank);
    EXPECT_EQ(versions, 4 - rank);
    EXPECT_EQ(theory, 4 - rank);
  }
  std::stringstream drawing;
  drawing << std::ifstream(svg).rdbuf();
  EXPECT_NE(drawing.str().find("U weight update (new version)"), std::string::npos);
  EXPECT_NE(drawing.str().find("step boundary (no flush)"), std::string::npos);
  EXPECT_NE(drawing.str().find("weight versions per rank 4/3/2/1"), std::string::npos);

  const Outcome two = run("--schedule 2bw --stages 4 --microbatches 4 --no-gantt");
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("bubble 0.0%; the 2bw rule"), std::string::npos) << two.output;
}

// Asynchronous replicas run in lock step (each update waits for its stage's replicas' sum): one pipeline whose
// updates also pay the sum's hops, each latency + gradient_bytes x per_byte = 0.1 here. Ordered at d = 4:
// 3 hops of the running sum and a broadcast of 2, so U costs 0.25 + 0.5 and a step 4 (1 + 2 + 0.75) = 15;
// allreduce: 4 hops, 14.6.
TEST_F(KpipeSim, AsynchronousReplicasPayTheirSumAtEveryUpdate) {
  const std::string costs = "--schedule pipedream --stages 4 --microbatches 4 --cost-b 2 --cost-step 0.25 --no-gantt "
                            "--replicas 4 --gradient-bytes 1e6 --bandwidth 1e7";
  const Outcome ordered = run(costs);
  ASSERT_EQ(ordered.status, 0) << ordered.output;
  EXPECT_NE(ordered.output.find("x 4 replicas (their sum at every update, ordered"), std::string::npos) << ordered.output;
  EXPECT_NE(ordered.output.find("steady state: steps 2 to 3, 15 per step"), std::string::npos) << ordered.output;
  const Outcome allreduce = run(costs + " --allreduce");
  ASSERT_EQ(allreduce.status, 0) << allreduce.output;
  EXPECT_NE(allreduce.output.find("steady state: steps 2 to 3, 14.6 per step"), std::string::npos) << allreduce.output;
}

TEST_F(KpipeSim, AsynchronousBadCombinationsExitTwoWithOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"--schedule 2bw --stages 4 --microbatches 2",
       "kpipe-sim: error: --microbatches = 2 per pipeline is below --stages = 4: 2bw needs at least as many"},
      {"--schedule 1f1b --vertical-sync 1",
       "kpipe-sim: error: --vertical-sync = 1 needs --schedule pipedream (got --schedule 1f1b)"},
      {"--schedule pipedream --vertical-sync 2", "kpipe-sim: error: --vertical-sync = 2: expected 0 or 1"},
      {"--schedule 1f1b --steps 3", "kpipe-sim: error: --steps = 3: only asynchronous schedules"},
      {"--schedule 2bw --split-backward", "kpipe-sim: error: --split-backward: asynchronous schedules run whole "
                                          "backwards (B)"},
      {"--schedule pipedream --chunks 2", "kpipe-sim: error: --chunks = 2: asynchronous schedules run one chunk per rank"},
      {"--schedule pipedream --replicas 2 --dp-group 2",
       "kpipe-sim: error: --dp-group = 2 with the pipedream schedule: asynchronous schedules sum the replicas' "
       "gradients at every update"},
  };
  for (const auto& [arguments, message] : cases) {
    const Outcome r = run(arguments);
    EXPECT_EQ(r.status, 2) << arguments;
    EXPECT_EQ(r.output.rfind(message, 0), 0u) << arguments << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

TEST_F(KpipeSim, ReadsPrintsAndDrawsAHandWrittenSchedule) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream out(dir + "kpipe_sim_test.sched");
    out << "# 1F1B on two ranks\nF0 F1 B0 B1 S\nF0 B0 F1 B1 S\n";
  }
  const Outcome r = run("--schedule-file '" + dir + "kpipe_sim_test.sched' --print-schedule --lowered --svg '" + dir +
                    "kpipe_sim_test.svg'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("ra0<0 F0 B0 sg0>0 ra1<0 F1 B1 sg1>0 S"), std::string::npos) << r.output;
  std::ifstream svg(dir + "kpipe_sim_test.svg");
  std::stringstream contents;
  contents << svg.rdbuf();
  EXPECT_EQ(contents.str().rfind("<svg", 0), 0u);
  EXPECT_NE(contents.str().find("bubble 33.3%"), std::string::npos);
  std::remove((dir + "kpipe_sim_test.sched").c_str());
  std::remove((dir + "kpipe_sim_test.svg").c_str());
}

TEST_F(KpipeSim, ZeroBubbleVTakesTwoChunksByDefault) {
  const Outcome r = run("--schedule zb-v --stages 4 --microbatches 8 --cost-f 0.5 --cost-i 0.5 --cost-w 0.5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("schedule zb-v: 4 ranks, 8 micro-batches, 2 chunks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("makespan 25.5, bubble 5.9%"), std::string::npos) << r.output;
}

// --transport nccl: the lists NCCL runs (the stream-order pass moved receives) and the passes applied; the
// replicas' sums where the proof puts them.
TEST_F(KpipeSim, PrintsTheListsNcclRunsAndThePasses) {
  const std::string interleaved = "--schedule interleaved --stages 2 --microbatches 4 --chunks 2 --print-schedule "
                                  "--lowered --no-gantt";
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

  const Outcome replicas = run("--schedule 1f1b --stages 2 --microbatches 2 --replicas 2 --transport nccl --no-gantt");
  ASSERT_EQ(replicas.status, 0) << replicas.output;
  EXPECT_NE(replicas.output.find("stream-ordered delivery, gradient sums ordered-by-mpi"), std::string::npos)
      << replicas.output;
  // An asynchronous schedule on NCCL: each step receives the activation its last forward pair sent.
  const Outcome pipedream =
      run("--schedule pipedream --stages 2 --microbatches 2 --transport nccl --print-schedule --lowered --no-gantt");
  ASSERT_EQ(pipedream.status, 0) << pipedream.output;
  EXPECT_NE(pipedream.output.find("U1@2 ra2<0 S"), std::string::npos) << pipedream.output;
  // A training configuration's transport: the lists and memory of what NCCL runs.
  const Outcome memory = run("--memory --preset bench --pipeline-size 2 --schedule interleaved --chunks 2 "
                             "--microbatches 8 --transport nccl");
  ASSERT_EQ(memory.status, 0) << memory.output;
  EXPECT_NE(memory.output.find("-> order_for_streams (12 receives moved); stream-ordered delivery"), std::string::npos)
      << memory.output;
}

// --memory: every rank's predicted memory by category for a training configuration (kpipe-train's options).
TEST_F(KpipeSim, MemoryOfAConfiguration) {
  const Outcome r = run("--memory --preset bench --pipeline-size 2 --schedule 1f1b --microbatches 8");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("layout p2 x d1 1f1b m=8 recompute=none partition=uniform on 2 ranks"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("activations"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0: slots/backward sets per chunk 2/1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: slots/backward sets per chunk 1/1"), std::string::npos) << r.output;
}

// --recommend: the fastest layouts that fit, each with its kpipe-train command line; what it takes when none does.
TEST_F(KpipeSim, RecommendsLayoutsThatFit) {
  const Outcome r = run("--recommend --ranks 2 --memory-per-rank 100MiB --preset bench --top 3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("fit in 100 MiB per rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  1 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  3 "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("  4 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mpiexec -n 2 kpipe-train --preset bench --pipeline-size "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--memory-limit-per-rank 100MiB"), std::string::npos) << r.output;
  const Outcome none = run("--recommend --ranks 1 --memory-per-rank 50MiB --preset bench");
  EXPECT_EQ(none.status, 1) << none.output;
  EXPECT_NE(none.output.find("nothing fits: the leanest layout on 1 ranks needs"), std::string::npos) << none.output;
  EXPECT_NE(none.output.find(" ranks it fits: "), std::string::npos) << none.output;
}

double makespan(const std::string& output) {
  const auto at = output.find("makespan ");
  return at == std::string::npos ? -1 : std::stod(output.substr(at + 9));
}

TEST_F(KpipeSim, CostsFromAModelFollowItsVocabulary) {
  // The small preset on 2 stages: with bytes the balanced partition splits the blocks evenly; with a BPE
  // vocabulary of 8192 the LM head takes a stage of its own, and the uniform partition (two blocks beside
  // the head) is predicted far slower than the balanced one.
  const std::string base = "--schedule 1f1b --stages 2 --microbatches 4 --preset small --sequences 4 --no-gantt "
                           "--partition balanced";
  const Outcome bytes = run(base + " --vocab 256");
  ASSERT_EQ(bytes.status, 0) << bytes.output;
  EXPECT_NE(bytes.output.find("0      0     0-2"), std::string::npos) << bytes.output;
  EXPECT_NE(bytes.output.find("1      1     3-5"), std::string::npos) << bytes.output;
  const Outcome bpe = run(base + " --vocab 8192");
  ASSERT_EQ(bpe.status, 0) << bpe.output;
  EXPECT_NE(bpe.output.find("0      0     0-4"), std::string::npos) << bpe.output;
  EXPECT_NE(bpe.output.find("1      1     5-5"), std::string::npos) << bpe.output;
  // kpipe-train's default partition is kpipe-sim's.
  const Outcome uniform = run("--schedule 1f1b --stages 2 --microbatches 4 --preset small --sequences 4 --no-gantt "
                              "--vocab 8192");
  ASSERT_EQ(uniform.status, 0) << uniform.output;
  EXPECT_EQ(kpipe::to_string(kpipe::Config{}.pipeline.partition), "uniform");
  EXPECT_NE(uniform.output.find("uniform partition"), std::string::npos) << uniform.output;
  EXPECT_GT(makespan(uniform.output), 1.2 * makespan(bpe.output)) << uniform.output << bpe.output;
  EXPECT_GT(makespan(bpe.output), 1.5 * makespan(bytes.output)) << "the head's FLOPs count";
  // Recomputation is priced by the same cost model: every block's recomputed forward, paid before its backward.
  const Outcome block = run(base + " --vocab 256 --recompute block");
  ASSERT_EQ(block.status, 0) << block.output;
  EXPECT_NE(block.output.find("recompute block"), std::string::npos) << block.output;
  EXPECT_GT(makespan(block.output), 1.1 * makespan(bytes.output)) << block.output;
  EXPECT_LT(makespan(block.output), 1.5 * makespan(bytes.output)) << block.output;
}

TEST_F(KpipeSim, BadInputIsOneLineAndExitCodeTwo) {
  for (const char* arguments : {"--schedule zigzag", "--schedule interleaved --chunks 2 --microbatches 6",
                                "--stages 0", "--cost-b -2", "--no-such-option", "--schedule-file /nonexistent/x",
                                "--recommend --ranks 2 --memory-per-rank lots", "--recommend --memory-per-rank 1GiB",
                                "--memory --model.d_model 250", "--recommend --memory --ranks 2 --memory-per-rank 1G",
                                "--vocab 8192", "--preset huge", "--preset small --partition greedy",
                                "--recompute block", "--preset small --recompute everything",
                                "--transport carrier-pigeon"}) {
    const Outcome r = run(arguments);
    EXPECT_EQ(r.status, 2) << arguments;
    EXPECT_EQ(r.output.rfind("kpipe-sim: error: ", 0), 0u) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  }
  EXPECT_EQ(run("--schedule interleaved --chunks 2 --microbatches 6").output,
            "kpipe-sim: error: --microbatches = 6: the interleaved schedule needs a multiple of --stages = 4\n");
}

// kpipe-sim and kpipe-train spell each idea one way: the spellings kpipe-sim had of its own are answered, in
// every mode, with the one it takes now.
TEST_F(KpipeSim, OldSpellingsNameTheNewOnes) {
  const std::string bandwidth = "kpipe-sim: error: --per-byte is --bandwidth now, in bytes per time unit";
  const std::string vertical = "kpipe-sim: error: --vertical-sync takes a value, as kpipe-train's: --vertical-sync 1";
  const std::pair<const char*, std::string> cases[] = {
      {"--per-byte 1e-9", bandwidth},
      {"--per-byte=1e-9", bandwidth},
      {"--recommend --ranks 2 --per-byte 1e-9", bandwidth},
      {"--schedule pipedream --vertical-sync", vertical},
      {"--schedule pipedream --vertical-sync --steps 5", vertical},
  };
  for (const auto& [arguments, message] : cases) {
    const Outcome r = run(arguments);
    EXPECT_EQ(r.status, 2) << arguments;
    EXPECT_EQ(r.output.rfind(message, 0), 0u) << arguments << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  // The new spellings: a bandwidth of 1e7 bytes per time unit is a per-byte cost of 1e-7.
  const Outcome priced = run("--schedule 1f1b --stages 2 --microbatches 2 --activation-bytes 1e7 --bandwidth 1e7 "
                             "--no-gantt");
  ASSERT_EQ(priced.status, 0) << priced.output;
  EXPECT_NE(priced.output.find("latency=0 bandwidth=1e+07 activation_bytes=1e+07"), std::string::npos)
      << priced.output;
  EXPECT_GT(makespan(priced.output), makespan(run("--schedule 1f1b --stages 2 --microbatches 2 --no-gantt").output) + 1.5)
      << "each of the messages costs 1";
}

}  // namespace
