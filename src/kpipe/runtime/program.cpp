#include "kpipe/runtime/program.hpp"

#include <algorithm>
#include <utility>

#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::runtime {

using schedule::Action;
using schedule::Op;

Program program_of(const schedule::Schedule& lists, int rank, const schedule::BufferPlan& buffers, int tag_base,
                   std::string activity) {
  Program p{lists, lists.actions.at(rank), buffers, {}, tag_base, std::move(activity)};
  p.tags.assign(p.actions.size(), -1);
  for (std::size_t i = 0; i < p.actions.size(); ++i)
    if (schedule::is_comm(p.actions[i].op))
      p.tags[i] = schedule::message_tag(lists, schedule::message_of(lists, rank, p.actions[i]));
  return p;
}

Action instance_of(const Program& program, std::size_t i, const Offset& offset) {
  Action a = offset.steps == 0 ? program.actions[i]
                                : schedule::shifted(program.actions[i], program.lists, offset.steps, 0);
  // A resumed run's lists number micro-batches and versions from the resume; versions below the run's first
  // are the initial weights (the rule's max(0, ...)).
  if ((offset.microbatch == 0 && offset.version == 0) || a.op == Op::step) return a;
  a.microbatch += int(offset.microbatch);
  if (a.op == Op::update) a.version += offset.version;
  else if (schedule::is_compute(a.op)) a.version = std::max(0, a.version + offset.version);
  return a;
}

std::int64_t microbatch_shift(const Program& program, const Offset& offset) {
  return std::int64_t(offset.steps) * program.lists.microbatches + offset.microbatch;
}

}  // namespace kpipe::runtime
