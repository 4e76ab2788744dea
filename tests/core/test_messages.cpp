// What every message is made of: the program's name as its prefix, counts with their nouns, steps numbered
// from 1.
#include <gtest/gtest.h>

#include "kpipe/core/plural.hpp"
#include "kpipe/core/program_name.hpp"
#include "kpipe/core/step_number.hpp"

namespace kpipe {
namespace {

TEST(Messages, CountsTakeTheirNounsPlural) {
  EXPECT_EQ(quantity(1, "chunk"), "1 chunk");
  EXPECT_EQ(quantity(2, "chunk"), "2 chunks");
  EXPECT_EQ(quantity(0, "step"), "0 steps");
  EXPECT_EQ(quantity(1, "other rank"), "1 other rank");
  EXPECT_EQ(quantity(4, "micro-batch"), "4 micro-batches");
  EXPECT_EQ(quantity(1, "micro-batch"), "1 micro-batch");
}

TEST(Messages, TheProgramNameIsTheOneItWasStartedUnder) {
  EXPECT_EQ(program_name(), "kpipe_test_core");  // this test program, however it is started
}

TEST(Messages, StepsAreNumberedFromOne) {
  EXPECT_EQ(step_number(0), 1);  // the first optimizer step
  EXPECT_EQ(step_number(99), 100);  // after it, 100 steps are done: a checkpoint's step-00000100.h5
}

}  // namespace
}  // namespace kpipe
