#pragma once
// A list ready to run on this rank, and which part of it one run executes as which instance: a training step
// of a list that holds several steps runs one of them, shifted by whole steps; a resumed run's lists number
// their micro-batches and versions from the resume.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

// The actions, the schedule they come from (the layout), where its buffers come and go (the plan's), each
// message's tag, and an offset of the tags, so that lists that may be under way at once (a training step's last
// sends and an evaluation) never share a tag.
struct Program {
  schedule::Schedule lists;
  std::vector<schedule::Action> actions;
  schedule::BufferPlan buffers;
  std::vector<int> tags;  // per position: a message's tag as the list numbers it (tag_base not added); -1 otherwise
  int tag_base = 0;
  std::string activity = "step";  // names the program in a timeout's message
};
// Rank `rank`'s part of `lists`, whose buffer plan is `buffers` (schedule::plan's for that rank).
Program program_of(const schedule::Schedule& lists, int rank, const schedule::BufferPlan& buffers, int tag_base,
                   std::string activity);

// Which instance of a list a run is: shifted by whole steps, micro-batches and versions numbered from a resume.
struct Offset {
  int steps = 0;
  std::int64_t microbatch = 0;
  int version = 0;
};

// What one run executes: positions [begin, end) of a program, as instance `offset`; they are step `step` of
// the steps its lists hold.
struct ListRange {
  std::size_t begin = 0, end = 0;
  Offset offset;
  int step = 0;
};
inline ListRange whole(const Program& program) { return {0, program.actions.size(), {}}; }

// Position `position` of `program` as instance `offset` runs it.
schedule::Action instance_of(const Program& program, std::size_t position, const Offset& offset);
// The micro-batches instance `offset` shifts the list's by (its messages' tags move with them).
std::int64_t microbatch_shift(const Program& program, const Offset& offset);

}  // namespace kpipe::runtime
