// A program stores each message's tag once; a run shifted by whole steps, or numbered from a resume, moves the
// tags with its micro-batches: the tag the executor sends under is the instance's own message's, on every
// rank, position and shift.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "kpipe/runtime/program.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"

namespace kpipe::runtime {
namespace {

using schedule::Schedule;

TEST(Program, TheStoredTagShiftedIsTheInstancesMessagesTag) {
  const Schedule lists[] = {schedule::lower(schedule::asynchronous(schedule::Updates::pipedream, 3, 2, {5, false})),
                            schedule::lower(schedule::asynchronous(schedule::Updates::two_bw, 2, 3, {4, true})),
                            schedule::lower(schedule::interleaved(2, 4, 2))};
  int checked = 0;
  for (const Schedule& s : lists)
    for (int rank = 0; rank < s.ranks; ++rank) {
      const Program program = program_of(s, rank, schedule::plan_buffers(s, rank, s.actions[rank]), 0, "test");
      for (const Offset offset : {Offset{}, Offset{1, 0, 0}, Offset{3, 0, 0}, Offset{0, 7, 2}, Offset{2, 12, 3}}) {
        if (!s.asynchronous() && (offset.steps != 0 || offset.microbatch != 0)) continue;
        for (std::size_t i = 0; i < program.actions.size(); ++i) {
          if (!schedule::is_comm(program.actions[i].op)) {
            EXPECT_EQ(program.tags[i], -1);
            continue;
          }
          const auto instance = instance_of(program, i, offset);
          EXPECT_EQ(schedule::shifted_tag(s, program.tags[i], microbatch_shift(program, offset)),
                    schedule::message_tag(s, schedule::message_of(s, rank, instance)))
              << fmt::format("rank {} position {} shift {}+{}", rank, i, offset.steps, offset.microbatch);
          ++checked;
        }
      }
    }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace kpipe::runtime
