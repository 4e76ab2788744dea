// Simulator: the closed forms of makespan and bubble, message costs, local handoffs.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {
namespace {

Costs costs(double f, double b) {
  Costs c;
  c.f = f;
  c.b = b;
  return c;
}

// The figures the closed forms predict, to 1e-12 relative.
void expect_figures(const SimResult& sim, double makespan, double idle_fraction) {
  EXPECT_NEAR(sim.makespan, makespan, 1e-12 * makespan);
  for (double idle : sim.idle_fraction) EXPECT_NEAR(idle, idle_fraction, 1e-12);
  EXPECT_NEAR(sim.bubble, idle_fraction, 1e-12);
}

// GPipe and 1F1B: makespan (m + p - 1)(f + b), so every rank idles (p - 1) / (m + p - 1) of the time,
// whatever f and b (without communication costs).
TEST(Simulate, GpipeAndOneFOneBBubbleIsPMinusOneOverMPlusPMinusOne) {
  for (auto [f, b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}, std::pair{0.5, 1.5}}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        SCOPED_TRACE(fmt::format("f={} b={} p={} m={}", f, b, p, m));
        const double makespan = (m + p - 1) * (f + b), idle = double(p - 1) / (m + p - 1);
        expect_figures(simulate(gpipe(p, m), costs(f, b)), makespan, idle);
        expect_figures(simulate(one_f_one_b(p, m), costs(f, b)), makespan, idle);
      }
    }
  }
}

// Interleaved with v chunks, Megatron's cost model: a chunk costs 1/v of a stage (f/v, b/v), the bubble time
// shrinks from (p-1)(f+b) to (p-1)(f+b)/v: makespan m(f+b) + (p-1)(f+b)/v, idle fraction (p-1)/(v m + p - 1).
TEST(Simulate, InterleavedDividesTheBubbleByTheChunks) {
  for (auto [f, b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = p; m <= 16; m += p) {
        for (int v = 1; v <= 3; ++v) {
          SCOPED_TRACE(fmt::format("f={} b={} p={} m={} v={}", f, b, p, m, v));
          const double makespan = m * (f + b) + (p - 1) * (f + b) / v, idle = double(p - 1) / (v * m + p - 1);
          expect_figures(simulate(interleaved(p, m, v), costs(f / v, b / v)), makespan, idle);
        }
      }
    }
  }
}

// Naive: one virtual stage busy at a time, makespan m p v (f + b), idle 1 - 1/p.
TEST(Simulate, NaiveKeepsOneRankBusy) {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 4; ++m)
      for (int v = 1; v <= 3; ++v)
        expect_figures(simulate(naive(p, m, v), costs(1, 2)), 3.0 * m * p * v, 1.0 - 1.0 / p);
}

// ZB-H1 with F = I = W: the bubble falls from 1F1B's (p-1)(F+I+W) to (p-1)(F+I-W) once m >= p.
TEST(Simulate, ZeroBubbleH1CutsTheBubbleToAThird) {
  Costs c;
  c.f = c.i = c.w = 1;
  for (int p = 1; p <= 8; ++p) {
    for (int m = p; m <= 16; ++m) {
      SCOPED_TRACE(fmt::format("p={} m={}", p, m));
      expect_figures(simulate(zero_bubble_h1(p, m), c), 3.0 * m + (p - 1), double(p - 1) / (3 * m + p - 1));
      expect_figures(simulate(split_backward(one_f_one_b(p, m)), c), 3.0 * m + 2 * (p - 1),
                     2.0 * (p - 1) / (3 * m + 2 * (p - 1)));
    }
  }
}

// ZB-V with f = i = w per chunk (a chunk is half a stage) and m a multiple of p: the only idle time is the
// (p-1) forwards before the first activation reaches rank p-1, makespan 6m + (p-1); half of ZB-H1's
// (p-1)(F + I - W) with the same stage costs (F = I = W = 2), at the same memory (p micro-batches'
// activations on every rank). Other m: within p of the bound max(6m + p - 1, 4p + 1) (4p + 1: one
// micro-batch's path down the V and back, then its last W).
TEST(Simulate, ZeroBubbleVIdlesOnlyWhileTheFirstActivationTravels) {
  Costs chunk;
  chunk.f = chunk.i = chunk.w = 1;
  Costs stage;
  stage.f = stage.i = stage.w = 2;
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 24; ++m) {
      SCOPED_TRACE(fmt::format("p={} m={}", p, m));
      const SimResult v = simulate(zero_bubble_v(p, m), chunk);
      const double bound = std::max(6.0 * m + (p - 1), 4.0 * p + 1);
      if (m % p == 0) {
        EXPECT_NEAR(v.makespan, bound, 1e-9);
        const SimResult h1 = simulate(zero_bubble_h1(p, m), stage);
        EXPECT_NEAR(h1.makespan - 6.0 * m, 2.0 * (v.makespan - 6.0 * m), 1e-9);
      } else {
        EXPECT_GE(v.makespan, bound - 1e-9);
        EXPECT_LE(v.makespan, bound + p);
      }
    }
}

// Recomputation is paid by every B and I.
TEST(Simulate, RecomputationCostsEveryBackward) {
  Costs c = costs(1, 2);
  c.r = 0.5;
  const SimResult with = simulate(one_f_one_b(3, 6), c);
  const SimResult without = simulate(one_f_one_b(3, 6), costs(1, 2.5));
  EXPECT_DOUBLE_EQ(with.makespan, without.makespan);
  c.i = c.w = 1;
  EXPECT_DOUBLE_EQ(simulate(zero_bubble_h1(2, 4), c).busy[0], 4 * (1 + 1.5 + 1));
}

// GPipe with a message latency L and transfer time: the forward and the backward each cross p - 1 links,
// makespan (m + p - 1)(f + b) + 2 (p - 1)(L + bytes * per_byte).
TEST(Simulate, MessagesCostLatencyAndBandwidth) {
  Costs c = costs(1, 2);
  c.latency = 0.25;
  c.per_byte = 1e-3;
  c.activation_bytes = 500;
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 6; ++m) {
      const SimResult sim = simulate(gpipe(p, m), c);
      EXPECT_NEAR(sim.makespan, 3.0 * (m + p - 1) + 2 * (p - 1) * 0.75, 1e-9) << "p=" << p << " m=" << m;
    }
}

// On one rank the chunks hand over locally: no messages, no latency paid.
TEST(Simulate, LocalHandoffsCostNothing) {
  Costs c = costs(1, 2);
  c.latency = 100;
  const Schedule s = interleaved(1, 4, 3);
  EXPECT_EQ(lower(s), s);
  const SimResult sim = simulate(s, c);
  EXPECT_DOUBLE_EQ(sim.makespan, 4 * 3 * 3.0);
  EXPECT_DOUBLE_EQ(sim.bubble, 0.0);
}

TEST(Simulate, TimelineHoldsEveryComputeActionInOrder) {
  Costs c = costs(1, 2);
  c.step = 0.5;
  const Schedule s = one_f_one_b(2, 2);
  const SimResult sim = simulate(lower(s), c);
  ASSERT_EQ(sim.timeline.size(), 2u);
  // Rank 1 (last): F0 [1,2) B0 [2,4) F1 [4,5) B1 [5,7) S [7,7.5); rank 0 ends with B1 [7,9) S [9,9.5).
  const std::vector<std::pair<double, double>> rank1{{1, 2}, {2, 4}, {4, 5}, {5, 7}, {7, 7.5}};
  ASSERT_EQ(sim.timeline[1].size(), rank1.size());
  for (std::size_t i = 0; i < rank1.size(); ++i) {
    EXPECT_EQ(sim.timeline[1][i].action, s.actions[1][i]);
    EXPECT_DOUBLE_EQ(sim.timeline[1][i].start, rank1[i].first);
    EXPECT_DOUBLE_EQ(sim.timeline[1][i].end, rank1[i].second);
  }
  EXPECT_DOUBLE_EQ(sim.makespan, 9.5);
  EXPECT_DOUBLE_EQ(sim.busy[0], 6.5);
  EXPECT_DOUBLE_EQ(sim.idle_fraction[1], 3.0 / 9.5);
  EXPECT_EQ(sim.peak_stash, (std::vector<int>{2, 1}));
}

// Costs per virtual stage: with every stage alike they give the per-rank figures; a slower chunk shows up
// on its own rank (interleaved, 2 ranks x 2 chunks: virtual stage 3 is rank 1's second chunk).
TEST(Simulate, CostsPerVirtualStage) {
  const Schedule s = interleaved(2, 4, 2);
  const Costs c = costs(1, 2);
  const SimResult uniform = simulate(s, std::vector<Costs>(4, c));
  const SimResult reference = simulate(s, c);
  EXPECT_DOUBLE_EQ(uniform.makespan, reference.makespan);
  EXPECT_EQ(uniform.busy, reference.busy);
  std::vector<Costs> slow_last(4, c);
  slow_last[3] = costs(2, 4);
  const SimResult skewed = simulate(s, slow_last);
  EXPECT_DOUBLE_EQ(skewed.busy[1], reference.busy[1] + 4 * (1 + 2));  // 4 micro-batches, F and B one unit more
  EXPECT_DOUBLE_EQ(skewed.busy[0], reference.busy[0]);
  EXPECT_GT(skewed.makespan, reference.makespan);
  EXPECT_THROW(simulate(s, std::vector<Costs>(3, c)), std::invalid_argument);
}

TEST(Simulate, RejectsInvalidSchedulesAndCosts) {
  EXPECT_THROW(simulate(parse("F0 B0 S\nB0 F0 S\n")), InputError);
  Costs c;
  c.f = -1;
  EXPECT_THROW(simulate(gpipe(2, 2), c), InputError);
}

}  // namespace
}  // namespace kpipe::schedule
