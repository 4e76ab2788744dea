// Generators: every schedule validates (compute-only and lowered), the closed forms of the bubble and of the
// activation stash, and the errors for shapes a generator does not support.
#include <gtest/gtest.h>

#include <algorithm>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

#include "support/input_error.hpp"

namespace kpipe::schedule {
namespace {

// Every (name, p, m, v) a generator accepts, for p in 1..8, m in 1..16, v in 1..3.
struct Case {
  std::string name;
  int p, m, v;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      for (int v = 1; v <= 3; ++v) {
        cases.push_back({"naive", p, m, v});
        cases.push_back({"gpipe", p, m, v});
        if (v == 1 || m % p == 0) cases.push_back({"interleaved", p, m, v});
      }
      cases.push_back({"1f1b", p, m, 1});
      cases.push_back({"zb-h1", p, m, 1});
      cases.push_back({"zb-v", p, m, 2});
    }
  return cases;
}

std::string describe(const Case& c) { return fmt::format("{} p={} m={} v={}", c.name, c.p, c.m, c.v); }

TEST(Generate, EveryScheduleValidatesComputeOnlyLoweredAndSplit) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const Schedule s = generate(c.name, c.p, c.m, c.v);
    EXPECT_EQ(s.ranks, c.p);
    EXPECT_EQ(s.microbatches, c.m);
    EXPECT_EQ(s.chunks, c.v);
    EXPECT_NO_THROW(validate(s));
    EXPECT_NO_THROW(validate(lower(s)));
    if (c.name != "zb-h1" && c.name != "zb-v") {
      EXPECT_NO_THROW(validate(split_backward(s)));
    }
    EXPECT_EQ(strip_messages(lower(s)), s);
  }
}

TEST(Generate, LoweringAddsOneMessagePairPerBoundaryCrossing) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const Schedule s = lower(generate(c.name, c.p, c.m, c.v));
    int sends = 0, recvs = 0;
    for (const auto& list : s.actions)
      for (const auto& a : list) {
        sends += is_send(a.op);
        recvs += is_recv(a.op);
      }
    // Boundaries between virtual stages on different ranks, each crossed by an activation and a gradient:
    // p*v - 1 interleaved; in a V the turn (rank p-1's two chunks) is local, 2(p-1) crossings.
    const int crossings = c.p == 1 ? 0 : c.name == "zb-v" ? 2 * (c.p - 1) : c.p * c.v - 1;
    EXPECT_EQ(sends, 2 * c.m * crossings);
    EXPECT_EQ(recvs, sends);
  }
}

TEST(Generate, OneFOneBOnTwoRanks) {
  EXPECT_EQ(to_text(one_f_one_b(2, 3)), "F0 F1 B0 F2 B1 B2 S\nF0 B0 F1 B1 F2 B2 S\n");
  EXPECT_EQ(to_text(gpipe(2, 2)), "F0 F1 B0 B1 S\nF0 F1 B0 B1 S\n");
  EXPECT_EQ(to_text(naive(2, 2)), "F0 B0 F1 B1 S\nF0 B0 F1 B1 S\n");
  EXPECT_EQ(to_text(split_backward(gpipe(1, 2))), "F0 F1 I0 W0 I1 W1 S\n");
  EXPECT_EQ(to_text(lower(one_f_one_b(2, 2))),
            "F0 sa0>1 F1 sa1>1 rg0<1 B0 rg1<1 B1 S\n"
            "ra0<0 F0 B0 sg0>0 ra1<0 F1 B1 sg1>0 S\n");
}

TEST(Generate, InterleavedFollowsMegatronsOrder) {
  // p = 2, v = 2, m = 4: groups of p micro-batches through chunk 0, then chunk 1; rank 0 warms up with
  // 2(p-1) + (v-1)p = 4 chunk-forwards, rank 1 with 2.
  EXPECT_EQ(to_text(interleaved(2, 4, 2)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 S\n"
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 S\n");
  // Virtual stage c*p + r: the forward of a micro-batch visits rank 0, 1, 0, 1.
  const Schedule s = interleaved(2, 4, 2);
  EXPECT_EQ(s.virtual_stage(1, 0), 1);
  EXPECT_EQ(s.virtual_stage(0, 1), 2);
  EXPECT_EQ(s.rank_of(3), 1);
  EXPECT_EQ(s.chunk_of(3), 1);
  EXPECT_TRUE(s.is_last_stage(1, 1));
  EXPECT_EQ(interleaved(3, 5, 1), one_f_one_b(3, 5));
}

TEST(Generate, WeightGradientsComeInMicroBatchOrderOnEveryChunk) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const Schedule s = generate(c.name, c.p, c.m, c.v);
    for (const auto& list : s.actions) {
      std::vector<int> next(c.v, 0);
      for (const auto& a : list)
        if (a.op == Op::backward || a.op == Op::backward_weight) {
          EXPECT_EQ(a.microbatch, next[a.chunk]++);
        }
    }
  }
}

TEST(Generate, PeakStashClosedForms) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE(fmt::format("p={} m={}", p, m));
      const auto naive_peaks = peak_stash(naive(p, m));
      const auto gpipe_peaks = peak_stash(gpipe(p, m));
      const auto one_f_peaks = peak_stash(one_f_one_b(p, m));
      const auto zb_peaks = peak_stash(zero_bubble_h1(p, m));
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(naive_peaks[s], 1);
        EXPECT_EQ(gpipe_peaks[s], m);                    // all m on every stage, stage 0 included
        EXPECT_EQ(one_f_peaks[s], std::min(p - s, m));   // at most p
        EXPECT_LE(zb_peaks[s], std::min(p, m));          // ZB-H1 keeps 1F1B's bound of p
      }
      EXPECT_EQ(zb_peaks[0], std::min(p, m));
      for (int v = 2; v <= 3 && m % p == 0; ++v) {
        // Chunk-activations (each 1/v of a stage's): the warm-up plus one, all of them when m == p.
        const auto peaks = peak_stash(interleaved(p, m, v));
        for (int s = 0; s < p; ++s) {
          const int warmup = 2 * (p - 1 - s) + (v - 1) * p;
          EXPECT_EQ(peaks[s], m == p ? m * v : std::min(warmup + 1, m * v)) << "v=" << v << " s=" << s;
        }
      }
    }
  }
}

// The V placement: rank r holds virtual stages r (chunk 0) and 2p-1-r (chunk 1); a micro-batch turns around
// on rank p-1 without a message, and comes back to rank 0 for the loss.
TEST(Generate, ZeroBubbleVPlacesTheChunksInAV) {
  for (int p = 1; p <= 6; ++p) {
    const Schedule s = zero_bubble_v(p, 4);
    EXPECT_EQ(s.placement, Placement::v);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(s.virtual_stage(r, 0), r);
      EXPECT_EQ(s.virtual_stage(r, 1), 2 * p - 1 - r);
    }
    for (int k = 0; k < 2 * p; ++k) EXPECT_EQ(s.virtual_stage(s.rank_of(k), s.chunk_of(k)), k);
    EXPECT_TRUE(s.is_last_stage(0, 1));
    // Messages: p-1 boundaries down and p-1 up, each an activation and a gradient per micro-batch.
    int messages = 0;
    for (const auto& list : lower(s).actions)
      for (const Action& a : list) messages += is_comm(a.op) ? 1 : 0;
    EXPECT_EQ(messages, 4 * 2 * (p - 1) * 4) << "p=" << p;  // 2 ends x 2 directions x 2(p-1) boundaries x m
  }
}

// At most p micro-batches' worth of activations per rank: 2p chunk activations (each half a stage's).
TEST(Generate, ZeroBubbleVHoldsOneFOneBsBound) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 24; ++m) {
      const auto peaks = peak_stash(zero_bubble_v(p, m));
      for (int r = 0; r < p; ++r) EXPECT_LE(peaks[r], std::min(2 * p, 2 * m)) << "p=" << p << " m=" << m << " r=" << r;
    }
}

TEST(Generate, RejectsWhatItCannotDo) {
  EXPECT_NE(test::input_error_of([] { generate("zigzag", 4, 8, 1); }).find("pipeline.schedule = 'zigzag'"), std::string::npos);
  const std::string interleaved_error = test::input_error_of([] { generate("interleaved", 4, 6, 2); });
  EXPECT_NE(interleaved_error.find("train.microbatches = 6"), std::string::npos) << interleaved_error;
  EXPECT_NE(interleaved_error.find("pipeline.pipeline_size = 4"), std::string::npos) << interleaved_error;
  EXPECT_NE(test::input_error_of([] { generate("1f1b", 4, 8, 2); }).find("pipeline.chunks = 2"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { generate("zb-h1", 4, 8, 2); }).find("pipeline.chunks = 2"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { generate("gpipe", 0, 8, 1); }).find("pipeline.pipeline_size = 0"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { generate("1f1b", 2, 0, 1); }).find("train.microbatches = 0"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { generate("naive", 2, 2, 0); }).find("pipeline.chunks = 0"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { generate("zb-v", 4, 8, 1); }).find("pipeline.chunks = 1"), std::string::npos);
  EXPECT_EQ(synchronous_schedules().size(), 6u);
}

}  // namespace
}  // namespace kpipe::schedule
