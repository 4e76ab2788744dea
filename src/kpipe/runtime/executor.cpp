#include "kpipe/runtime/executor.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "kpipe/core/clock.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/runtime/peer_lost.hpp"

namespace kpipe::runtime {

using schedule::Action;
using schedule::Op;

namespace {

constexpr std::size_t all_sends = std::numeric_limits<std::size_t>::max();

}  // namespace

// Where one run stands on this rank (the buffers are the Buffers' business).
template <class T, class A> struct Executor<T, A>::Run {
  const Program* program = nullptr;
  Offset offset;
  std::int64_t shift = 0;  // the micro-batches the offset shifts the list's by: its tags move with them
  UpdatePolicy<T>* updates = nullptr;
  TokenSource* tokens = nullptr;
  std::int64_t step = 0;
  std::vector<comm::Transfer> recv;  // per position
  std::vector<bool> posted;          // per position
  std::vector<std::size_t> timed;    // per ActionClock index: the compute action's timeline entry
  double start = 0, busy = 0;
};

template <class T, class A>
Executor<T, A>::Executor(StageModel<T, A>& stage, const ExecutorLinks& links)
    : stage_(&stage), transport_(&links.transport), grid_(links.grid), timeout_s_(links.timeout_s),
      record_(&links.record), buffers_(stage.chunk_pointers(), links.microbatch_period) {
  record_->action_seconds.assign(std::size_t(stage.chunks()), {});
  record_->action_count.assign(std::size_t(stage.chunks()), {});
}

template <class T, class A> Executor<T, A>::~Executor() = default;

template <class T, class A> void Executor<T, A>::lost(const Run& run, const Action& a, std::size_t position) const {
  peer_lost(grid_, {run.program->activity, run.step, position}, a, stage_->chunks(), timeout_s_);
}

template <class T, class A>
double Executor<T, A>::run(const Program& program, const ListRange& range, UpdatePolicy<T>* updates,
                           TokenSource& tokens, std::int64_t step) {
  Run run;
  run.program = &program;
  run.offset = range.offset;
  run.shift = microbatch_shift(program, range.offset);
  run.updates = updates;
  run.tokens = &tokens;
  run.step = step;
  run.start = seconds_now();
  record_->timeline_origin = run.start;
  record_->timeline.clear();
  clock_.start(space_);
  buffers_.begin_run();
  run.recv.assign(program.actions.size(), comm::Transfer{});
  run.posted.assign(program.actions.size(), false);
  Kokkos::deep_copy(space_, tokens.losses(), 0.0);  // micro-batches whose loss is elsewhere count 0
  for (std::size_t i = range.begin; i < range.end; ++i) execute(run, i);
  // The list's end delivers every send. (A step boundary S delivers its step's last sends when the next run
  // begins: execute() stops there.)
  if (range.end == program.actions.size()) wait_for_sends(run, all_sends, range.end);
  // Stream-ordered transfers: the host learns here, with a bound, that the stream got through them. (A run
  // that ends at S too: the plan's stream-order pass receives every message within the step that sends it, so
  // none is left waiting across the step boundary, where every rank's host enters collectives.)
  if (transport_->stream_ordered() && !transport_->synchronize(space_, timeout_s_))
    lost(run, Action{Op::step, 0, 0, -1}, range.end);
  read_action_times(run);  // waits for the stream to finish the run's last compute action
  ++record_->runs;
  record_->message_buffers = buffers_.message_buffers();
  return run.busy;
}

template <class T, class A> void Executor<T, A>::finish_sends(const Program& program, std::int64_t step) {
  Run run;
  run.program = &program;
  run.step = step;
  wait_for_sends(run, all_sends, program.actions.size());
}

// Waits on the sends delivered by position `done`; a timeout names position `position`.
template <class T, class A>
void Executor<T, A>::wait_for_sends(const Run& run, std::size_t done, std::size_t position) {
  if (const Action* late = buffers_.reclaim(done, *transport_, space_, timeout_s_)) lost(run, *late, position);
}

// A receive is posted ahead, possibly before its micro-batch has a slot here: it lands in a spare, which the
// forward (activation) or backward (gradient) that uses it swaps into the slot. So a receive in flight holds
// one [N, C] buffer, never a whole stash slot.
template <class T, class A> void Executor<T, A>::post_receive(Run& run, std::size_t i) {
  if (run.posted[i]) return;
  const Action a = instance_of(*run.program, i, run.offset);
  const Program& program = *run.program;
  const View2<A> buffer =
      buffers_.receive_buffer(a.chunk, a.microbatch, a.op == Op::recv_gradient, program.buffers.spare[i]);
  const int tag = program.tag_base + schedule::shifted_tag(program.lists, program.tags[i], run.shift);
  run.recv[i] = transport_->recv(space_, buffer.data(), buffer.span() * sizeof(A), a.peer, tag);
  run.posted[i] = true;
}

template <class T, class A> void Executor<T, A>::execute(Run& run, std::size_t i) {
  const Action a = instance_of(*run.program, i, run.offset);
  const auto& plan = run.program->buffers;
  // Receives the coming actions need, posted now so that they arrive while this one runs (the plan posts none
  // ahead on a stream-ordered transport: a receive posted ahead would hold the stream until its data arrived).
  for (std::size_t k : plan.post_before[i]) post_receive(run, k);
  switch (a.op) {
    case Op::recv_activation:
    case Op::recv_gradient:
    case Op::send_activation:
    case Op::send_gradient: message(run, a, i); break;
    case Op::forward:
    case Op::backward:
    case Op::backward_input:
    case Op::backward_weight: compute(run, a, i); break;
    case Op::recv_sum:
    case Op::send_sum: {
      const double start = seconds_now();
      run.updates->run(a);
      const auto& grads = stage_->chunk(a.chunk).params().grads();
      record_->timeline.push_back(
          {a, start - run.start, seconds_now() - run.start, std::int64_t(grads.span() * sizeof(T))});
      break;
    }
    case Op::update: update(run, a); break;
    case Op::step:  // a step boundary: the sends it delivers are the next run's to wait on
      if (i == plan.renumber_after) buffers_.renumber(plan.renumbering);
      return;
  }
  if (observer_ && schedule::is_compute(a.op)) observer_(a, buffers_.slot(a.chunk, a.microbatch));
  wait_for_sends(run, i, i);
  for (const int chunk : plan.retire[i]) buffers_.retire(chunk, a.microbatch, plan.detach[i]);
}

// A send or receive of the pipeline. Consecutive messages go out as one group (NCCL: a pair of ranks sending to
// each other cannot deadlock; schedule/stream_order.hpp proves the groups safe). MPI posts never block: the
// group calls do nothing there. Timed on the host: posting (and, for receives, waiting).
template <class T, class A> void Executor<T, A>::message(Run& run, const Action& a, std::size_t i) {
  const Program& program = *run.program;
  const auto& list = program.actions;
  const double start = seconds_now();
  if (i == 0 || !schedule::is_comm(list[i - 1].op)) transport_->begin_group();
  if (schedule::is_recv(a.op)) {
    post_receive(run, i);
    if (!transport_->wait(space_, run.recv[i], timeout_s_)) lost(run, a, i);
  } else {
    auto& chunk = stage_->chunk(a.chunk);
    const int slot = buffers_.slot(a.chunk, a.microbatch);
    const View2<A>& buffer = a.op == Op::send_activation ? chunk.output(slot) : chunk.input_grad(slot);
    const int tag = program.tag_base + schedule::shifted_tag(program.lists, program.tags[i], run.shift);
    // The transport orders the send after the kernels queued so far (they complete the buffer).
    buffers_.add_send(a, i, program.buffers.delivered_after[i], program.buffers.spare[i]) =
        transport_->send(space_, buffer.data(), buffer.span() * sizeof(A), a.peer, tag);
  }
  if (i + 1 == list.size() || !schedule::is_comm(list[i + 1].op)) transport_->end_group();
  const auto& chunk = stage_->chunk(a.chunk);
  record_->timeline.push_back({a, start - run.start, seconds_now() - run.start,
                               chunk.rows() * chunk.channels() * std::int64_t(sizeof(A))});
}

// An update action: timed on the stream as F and B are (no fence: the span is read at the run's end), and work as
// they are (the simulator charges it as `step`).
template <class T, class A> void Executor<T, A>::update(Run& run, const Action& a) {
  const std::size_t timed = clock_.begin(space_);
  run.updates->run(a);
  clock_.end(space_, timed);
  record_->timeline.push_back({a, 0, 0, 0});
  run.timed.push_back(record_->timeline.size() - 1);
}

// F, B, I or W on its chunk, timed on the stream (no fence: the span is read at the run's end).
template <class T, class A> void Executor<T, A>::compute(Run& run, const Action& a, std::size_t i) {
  const auto& lists = run.program->lists;
  const auto& plan = run.program->buffers;
  const int c = a.chunk, mb = a.microbatch;
  auto& chunk = stage_->chunk(c);
  const int vstage = stage_->virtual_stage(c);
  // The previous virtual stage's chunk when it is on this rank too (the data is handed over in place).
  const int local_prev = vstage > 0 && lists.rank_of(vstage - 1) == grid_.stage ? lists.chunk_of(vstage - 1) : -1;
  // A forward's tokens are drawn on the host before its span begins.
  const bool reads_tokens = a.op == Op::forward && (chunk.first() || chunk.last());
  const int row = reads_tokens ? run.tokens->stage(mb) : -1;
  const std::size_t timed = clock_.begin(space_);
  if (run.updates && a.op != Op::backward_weight) run.updates->before_compute(a);
  switch (a.op) {
    case Op::forward: {
      buffers_.take_slot(c, mb, plan.slot[i]);
      const int slot = buffers_.slot(c, mb);
      buffers_.move_in_activation(c, mb, plan.spare[i]);
      if (local_prev >= 0)  // the previous virtual stage's output, kept in its slot, is our input
        Kokkos::deep_copy(space_, chunk.input(slot), stage_->chunk(local_prev).output(buffers_.slot(local_prev, mb)));
      if (reads_tokens) run.tokens->staging().load(space_, chunk, slot, row);
      chunk.forward(space_, slot);
      if (chunk.last())  // left on the device: read once at the run's end
        chunk.loss_sum(space_, slot, Kokkos::subview(run.tokens->losses(), run.tokens->loss_slot(mb)));
      record_->peak_stash = std::max(record_->peak_stash, ++stash_);
      if (lists.forward_only) --stash_;  // nothing is kept for a backward
      break;
    }
    case Op::backward:
    case Op::backward_input: {
      const int slot = buffers_.slot(c, mb);
      buffers_.move_in_gradient(c, mb, plan.spare[i]);
      chunk.backward_input(space_, slot, run.updates->loss_scale(), plan.backward_set[i]);
      if (local_prev >= 0)
        Kokkos::deep_copy(space_, stage_->chunk(local_prev).output_grad(buffers_.slot(local_prev, mb)),
                          chunk.input_grad(slot));
      if (a.op == Op::backward) {
        chunk.backward_weight(space_, slot);
        --stash_;
      }
      run.updates->after_backward(a);
      break;
    }
    case Op::backward_weight:
      chunk.backward_weight(space_, buffers_.slot(c, mb));
      --stash_;
      break;
    default: break;
  }
  clock_.end(space_, timed);
  record_->timeline.push_back({a, 0, 0, 0});
  run.timed.push_back(record_->timeline.size() - 1);
}

// The compute actions' spans, now that the stream has run them (ActionClock), into the timeline and the sums.
template <class T, class A> void Executor<T, A>::read_action_times(Run& run) {
  const auto spans = clock_.read();
  for (std::size_t k = 0; k < spans.size(); ++k) {
    TimedAction& entry = record_->timeline[run.timed[k]];
    entry.start = spans[k].start;
    entry.end = spans[k].end;
    const double seconds = spans[k].end - spans[k].start;
    run.busy += seconds;
    // The first run allocates the stash: not representative.
    if (record_->runs > 0 && schedule::is_compute(entry.action.op)) {
      record_->action_seconds[entry.action.chunk][int(entry.action.op)] += seconds;
      ++record_->action_count[entry.action.chunk][int(entry.action.op)];
    }
  }
}

#define KPIPE_INSTANTIATE(T, A) template class Executor<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
