// Text form: round trips of every generated schedule, the token syntax, and parse errors naming line and token.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {
namespace {

std::string parse_error(const std::string& text, int microbatches = 0, int chunks = 0) {
  try {
    parse(text, microbatches, chunks);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(parsed)";
}

TEST(Text, EveryGeneratedScheduleRoundTrips) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      for (int v = 1; v <= 3; ++v) {
        std::vector<Schedule> schedules{naive(p, m, v), gpipe(p, m, v)};
        if (v == 1) {
          schedules.push_back(one_f_one_b(p, m));
          schedules.push_back(zero_bubble_h1(p, m));
          schedules.push_back(split_backward(one_f_one_b(p, m)));
        }
        if (v == 1 || m % p == 0) schedules.push_back(interleaved(p, m, v));
        if (v == 2) schedules.push_back(zero_bubble_v(p, m));  // its placement line comes along
        for (const Schedule& s : schedules) {
          EXPECT_EQ(parse(to_text(s)), s) << to_text(s);
          EXPECT_EQ(parse(to_text(lower(s))), lower(s)) << to_text(lower(s));
          EXPECT_EQ(parse(to_text(s), m, v), s);
        }
      }
    }
  }
}

TEST(Text, Tokens) {
  EXPECT_EQ(to_token(Action{Op::forward, 3, 0, -1}, 1), "F3");
  EXPECT_EQ(to_token(Action{Op::forward, 3, 1, -1}, 2), "F3.1");
  EXPECT_EQ(to_token(Action{Op::forward, 3, 0, -1}, 2), "F3.0");
  EXPECT_EQ(to_token(Action{Op::backward, 12, 0, -1}, 1), "B12");
  EXPECT_EQ(to_token(Action{Op::backward_input, 2, 0, -1}, 1), "I2");
  EXPECT_EQ(to_token(Action{Op::backward_weight, 2, 2, -1}, 3), "W2.2");
  EXPECT_EQ(to_token(Action{Op::step, 0, 0, -1}, 3), "S");
  EXPECT_EQ(to_token(Action{Op::send_activation, 3, 1, 2}, 2), "sa3.1>2");
  EXPECT_EQ(to_token(Action{Op::recv_activation, 3, 0, 0}, 1), "ra3<0");
  EXPECT_EQ(to_token(Action{Op::send_gradient, 0, 0, 1}, 1), "sg0>1");
  EXPECT_EQ(to_token(Action{Op::recv_gradient, 4, 1, 3}, 2), "rg4.1<3");
}

TEST(Text, CommentsBlankLinesAndInference) {
  const Schedule s = parse("# a hand-written 1F1B\n\nF0 F1 B0 B1 S   # rank 0\n  F0 B0 F1 B1 S\n# end\n");
  EXPECT_EQ(s, one_f_one_b(2, 2));
  const Schedule chunked = parse("F0.0 F0.1 B0.1 B0.0 S\n");
  EXPECT_EQ(chunked.ranks, 1);
  EXPECT_EQ(chunked.microbatches, 1);
  EXPECT_EQ(chunked.chunks, 2);
  EXPECT_EQ(parse("F0 B0 S\n", 1, 3).chunks, 3);  // given sizes win over inferred ones
}

TEST(Text, ErrorsNameLineAndToken) {
  EXPECT_EQ(parse_error("F0 B0 S\n\nF0 X1 S\n"),
            "schedule line 3 token 2 'X1': unknown action (F, B, I, W, S, sa, ra, sg, rg, ss, rs)");
  EXPECT_EQ(parse_error("F0 B S\n"), "schedule line 1 token 2 'B': expected a micro-batch number");
  EXPECT_EQ(parse_error("F0 B0.x S\n"), "schedule line 1 token 2 'B0.x': expected a chunk number after '.'");
  EXPECT_EQ(parse_error("F0 sa0 S\n"), "schedule line 1 token 2 'sa0': expected '>' and the receiving rank");
  EXPECT_EQ(parse_error("ra0>1 F0 S\n"), "schedule line 1 token 1 'ra0>1': expected '<' and the sending rank");
  EXPECT_EQ(parse_error("F0 B0x S\n"), "schedule line 1 token 2 'B0x': unexpected characters at the end");
  EXPECT_EQ(parse_error("sx0>1\n"), "schedule line 1 token 1 'sx0>1': a message is sa, ra, sg, rg (or ss, "
                                    "rs) followed by the micro-batch");
  EXPECT_EQ(parse_error("F0 F9 B0 B9 S\n", 8), "schedule line 1 token 2 'F9': micro-batch 9 out of range "
                                               "(train.microbatches = 8)");
  EXPECT_EQ(parse_error("F0.2 B0.2 S\n", 0, 2), "schedule line 1 token 1 'F0.2': chunk 2 out of range "
                                                "(pipeline.chunks = 2)");
  EXPECT_EQ(parse_error("F0 sa0>4 S\n"), "schedule line 1 token 2 'sa0>4': rank 4 out of range (1 ranks, one per line)");
  EXPECT_EQ(parse_error("# nothing\n\n"), "schedule: no actions (one line of actions per rank)");
  EXPECT_EQ(parse_error("F99999999 S\n"), "schedule line 1 token 1 'F99999999': a micro-batch number too large");
}

TEST(Text, ReadsFiles) {
  const std::string path = ::testing::TempDir() + "kpipe_test_schedule.txt";
  {
    std::ofstream out(path);
    out << "F0 F1 B0 B1 S\nF0 B0 F1 Q1 S\n";
  }
  try {
    read_schedule_file(path);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "pipeline.schedule_file = '" + path + "' line 2 token 4 'Q1': unknown action (F, B, "
                                     "I, W, S, sa, ra, sg, rg, ss, rs)");
  }
  {
    std::ofstream out(path);
    out << to_text(one_f_one_b(3, 4));
  }
  EXPECT_EQ(read_schedule_file(path), one_f_one_b(3, 4));
  std::remove(path.c_str());
  EXPECT_THROW(read_schedule_file(path), InputError);
}

}  // namespace
}  // namespace kpipe::schedule
