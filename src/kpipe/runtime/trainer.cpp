#include "kpipe/runtime/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kpipe/core/error.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/partition/partition.hpp"
#include "kpipe/runtime/placement.hpp"
#include "kpipe/schedule/delivery.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/stream_order.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::runtime {

using schedule::Action;
using schedule::Op;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

schedule::Schedule make_schedule(const Config& c, int local_microbatches) {
  const auto& p = c.pipeline;
  schedule::Schedule s = p.schedule_file.empty()
                             ? schedule::generate(p.schedule, p.pipeline_size, local_microbatches, p.chunks)
                             : schedule::read_schedule_file(p.schedule_file, local_microbatches, p.chunks);
  require(s.ranks == p.pipeline_size && s.microbatches == local_microbatches && s.chunks == p.chunks,
          "pipeline.schedule_file = '{}': written for {} ranks, {} micro-batches, {} chunks; the run has {}, {}, {}",
          p.schedule_file, s.ranks, s.microbatches, s.chunks, p.pipeline_size, local_microbatches, p.chunks);
  s = schedule::lower(s);
  schedule::validate(s);
  return s;
}

// Replicas after the first, under the ordered reduction: B becomes I, and the weight gradients (W, and the
// W half of each B) move to the end, in the order the schedule had them (increasing micro-batch per
// chunk), so that they add onto the previous replica's sum exactly as one rank would have added them.
std::vector<Action> defer_weight_gradients(const std::vector<Action>& list, std::size_t& deferred_from) {
  std::vector<Action> main, deferred;
  for (const Action& a : list) {
    if (a.op == Op::step) continue;
    if (a.op == Op::backward || a.op == Op::backward_weight) {
      Action w = a;
      w.op = Op::backward_weight;
      deferred.push_back(w);
      if (a.op == Op::backward_weight) continue;
      Action i = a;
      i.op = Op::backward_input;
      main.push_back(i);
      continue;
    }
    main.push_back(a);
  }
  deferred_from = main.size();
  main.insert(main.end(), deferred.begin(), deferred.end());
  main.push_back(Action{Op::step, 0, 0, -1});
  return main;
}

}  // namespace

// Where one step stands on this rank.
template <class T> struct Trainer<T>::StepState {
  std::vector<std::vector<int>> slot;             // [chunk][micro-batch] -> slot, -1 when none
  std::vector<comm::Transfer> recv;               // per action index
  std::vector<bool> posted;                       // per action index
  // A send in flight reads its slot's buffer, or, once the slot has been retired, the buffer it took along.
  struct PendingSend {
    int chunk, slot;
    bool gradient;
    std::size_t delivered_after;
    comm::Transfer transfer;
    View2<T> detached;  // empty while the send reads from its slot
    bool reads_slot(int c, int s) const { return chunk == c && slot == s && detached.data() == nullptr; }
  };
  std::vector<PendingSend> sends;
  // [chunk][micro-batch]: an activation or gradient received into a spare, until its F or B moves it in
  std::vector<std::vector<View2<T>>> arrived_activation, arrived_gradient;
  std::vector<bool> last_touch;                   // per action index: the last use of its (chunk, micro-batch)
  std::vector<double> loss_sums;                  // per global micro-batch (last stage only)
  std::vector<std::size_t> timed;                 // per ActionClock index: the compute action's timeline entry
  double busy = 0;
  double start = 0;  // when the step began
};

template <class T>
Trainer<T>::Trainer(const Config& config, const data::Corpus& corpus, const comm::ProcessGrid& grid)
    : config_(config), corpus_(&corpus), grid_(grid), desc_(model::describe(config.model)) {
  const auto& tc = config.train;
  const auto& pc = config.pipeline;
  // Every id indexes the embedding and the head: the data's vocabulary must fit the model's.
  require(corpus.vocab() <= config.model.vocab,
          "model.vocab = {}: the data ({}) has a vocabulary of {} ({} tokens)", config.model.vocab, corpus.source,
          corpus.vocab(), data::to_string(corpus.tokenizer.kind()));
  require(tc.microbatches % grid.data_parallel == 0,
          "train.microbatches = {} is not divisible by pipeline.data_parallel = {}", tc.microbatches,
          grid.data_parallel);
  local_microbatches_ = tc.microbatches / grid.data_parallel;
  sequences_per_microbatch_ = tc.batch / tc.microbatches;
  schedule_ = make_schedule(config, local_microbatches_);
  // The transport ("auto" resolved as runtime/placement.hpp does without looking at the node). NCCL runs
  // transfers in stream order exactly where the list puts them: the schedule goes through the pass that
  // arranges its receives for that, and what runs must then be proved to match in order per pair of ranks
  // and to be free of deadlocks under NCCL's blocking semantics (schedule/stream_order.hpp).
  // Test hook: KPIPE_TEST_TRANSPORT=mpi-stream-ordered runs MPI with NCCL's semantics
  // (comm/stream_ordered_mpi.hpp), so that CPU tests run the NCCL path end to end.
  std::string transport = default_transport(pc.transport);
  if (const char* kind = std::getenv("KPIPE_TEST_TRANSPORT")) transport = kind;
  if (transport == "nccl" || transport == "mpi-stream-ordered") {
    schedule_ = schedule::order_for_streams(schedule_);
    schedule::validate(schedule_);
    schedule::Schedule executed = schedule_;
    if (grid.data_parallel > 1 && pc.dp_reduction == "ordered" && grid.replica > 0)
      for (auto& list : executed.actions) {
        std::size_t unused = 0;
        list = defer_weight_gradients(list, unused);
      }
    schedule::validate_stream_order(executed);
  }
  actions_ = schedule_.actions[grid.stage];
  deferred_from_ = actions_.size();
  if (grid.data_parallel > 1 && pc.dp_reduction == "ordered" && grid.replica > 0)
    actions_ = defer_weight_gradients(actions_, deferred_from_);
  delivered_after_ = schedule::delivery_points(schedule_, grid.stage, actions_);

  // The balanced partition weighs each stage's memory with what the schedule keeps in flight there.
  const partition::InFlight in_flight{schedule::peak_stash(schedule_), sequences_per_microbatch_};
  const auto ranges = partition::partition_layers(desc_, grid.pipeline_size, pc.chunks, pc.partition, in_flight);
  // Gradient buffers per slot only where an I and its W run apart (split backwards, or the weight
  // gradients deferred for the ordered reduction); with plain B one set per chunk serves every slot.
  const bool split = std::any_of(actions_.begin(), actions_.end(), [](const Action& a) {
    return a.op == Op::backward_input || a.op == Op::backward_weight;
  });
  for (int c = 0; c < pc.chunks; ++c) {
    const auto& r = ranges.at(schedule_.virtual_stage(grid.stage, c));
    chunks_.push_back(
        std::make_unique<model::Chunk<T>>(desc_, r.first, r.last, sequences_per_microbatch_, /*gradients_per_slot=*/split));
    chunks_.back()->params().initialize(space_, tc.seed);
  }
  if (const char* stall = std::getenv("KPIPE_TEST_STALL")) {
    int rank = -1;
    double seconds = 0;
    if (std::sscanf(stall, "%d:%lf", &rank, &seconds) == 2 && rank == grid.world_rank) test_stall_seconds_ = seconds;
  }
  action_seconds_.assign(chunks_.size(), {});
  action_count_.assign(chunks_.size(), {});
  transport_ = comm::make_transport(transport, grid.pipeline, pc.recv_timeout_s);
  replica_transport_ = comm::make_transport(transport, grid.replicas, pc.recv_timeout_s);
  const auto rows = std::int64_t(sequences_per_microbatch_) * config.model.seq_len;
  host_inputs_ = decltype(host_inputs_)(uninitialized("kpipe::runtime::Trainer::host_inputs"), local_microbatches_, rows);
  host_targets_ = decltype(host_targets_)(uninitialized("kpipe::runtime::Trainer::host_targets"), local_microbatches_, rows);
  loss_sums_ = Kokkos::View<double*, MemSpace>("kpipe::runtime::Trainer::loss_sums", tc.microbatches);
}

template <class T> Trainer<T>::~Trainer() = default;

// Every micro-batch's windows of the step into the staging rows, where a chunk on this rank reads tokens.
template <class T> void Trainer<T>::stage_tokens(std::int64_t step) {
  if (std::none_of(chunks_.begin(), chunks_.end(), [](const auto& c) { return c->first() || c->last(); })) return;
  for (int mb = 0; mb < local_microbatches_; ++mb) {
    const int global_mb = grid_.replica * local_microbatches_ + mb;
    data::fill_train_windows(corpus_->train, config_.train.seed, step, global_mb * sequences_per_microbatch_,
                             sequences_per_microbatch_, config_.model.seq_len, &host_inputs_(mb, 0),
                             &host_targets_(mb, 0));
  }
}

// Staging row `row` into the slot's token buffers, queued on the stream (no wait: the row is not refilled
// before the step's final fence).
template <class T> void Trainer<T>::load_tokens(int c, int slot, int row) {
  auto& chunk = *chunks_[c];
  if (chunk.first()) Kokkos::deep_copy(space_, chunk.tokens(slot), Kokkos::subview(host_inputs_, row, Kokkos::ALL));
  if (chunk.last()) Kokkos::deep_copy(space_, chunk.targets(slot), Kokkos::subview(host_targets_, row, Kokkos::ALL));
}

// The compute actions' spans, now that the stream has run them (ActionClock), into the timeline and the means.
template <class T> void Trainer<T>::read_action_times(StepState& st) {
  const auto spans = clock_.read();
  for (std::size_t k = 0; k < spans.size(); ++k) {
    TimedAction& entry = timeline_[st.timed[k]];
    entry.start = spans[k].start;
    entry.end = spans[k].end;
    const double seconds = spans[k].end - spans[k].start;
    st.busy += seconds;
    if (step_ > 0) {  // the first step allocates the stash: not representative
      action_seconds_[entry.action.chunk][int(entry.action.op)] += seconds;
      ++action_count_[entry.action.chunk][int(entry.action.op)];
    }
  }
}

template <class T> int Trainer<T>::slot_for(StepState& st, int c, int mb) {
  int& s = st.slot[c][mb];
  if (s < 0) s = chunks_[c]->acquire();
  return s;
}

// The micro-batch is done on this chunk: its slot goes back to the pool at once. A send that may still
// read from the slot (not yet past its delivery point) takes the buffer with it, and a spare of the same
// shape takes its place in the slot, so a slot never waits for the network, and the pool stays as small as
// the stash (the spares are one [N, C] buffer per send in flight, not a whole stash each).
template <class T> void Trainer<T>::retire(StepState& st, int c, int mb) {
  const int slot = st.slot[c][mb];
  for (auto& send : st.sends) {
    if (!send.reads_slot(c, slot) || !send.transfer.active()) continue;
    auto& chunk = *chunks_[c];
    View2<T> spare = take_spare();
    if (send.gradient)
      chunk.swap_input_grad(slot, spare);
    else
      chunk.swap_output(slot, spare);
    send.detached = spare;  // after the swap: the buffer the send reads
  }
  chunks_[c]->release(slot);
  st.slot[c][mb] = -1;
}

// An [N, C] buffer from the spares (all chunks' activations have that shape), allocated when none is left:
// the number allocated follows from the schedule alone, and after the first step it is enough.
template <class T> View2<T> Trainer<T>::take_spare() {
  if (spare_buffers_.empty()) {
    const auto& chunk = *chunks_.front();
    return View2<T>(uninitialized("kpipe::runtime::Trainer::message_buffer"), chunk.rows(), chunk.channels());
  }
  View2<T> spare = spare_buffers_.back();
  spare_buffers_.pop_back();
  return spare;
}

// A buffer a receive landed in (empty when nothing was received for it) goes into the slot through `swap`,
// and the slot's former buffer becomes a spare.
template <class T> template <class Swap> void Trainer<T>::move_in(View2<T>& received, const Swap& swap) {
  if (received.data() == nullptr) return;
  swap(received);  // received now holds the slot's former buffer
  spare_buffers_.push_back(received);
  received = View2<T>();
}

// After action `done` (list.size() at the end of the step): waits on the sends known to be delivered by
// now (see delivery_points; the waits return at once) and puts their detached buffers back among the
// spares. Only the schedule decides when a buffer comes back, never how fast a peer happened to be, so the
// number of buffers allocated is the same on every run.
template <class T> void Trainer<T>::reclaim(StepState& st, std::size_t done) {
  for (auto& s : st.sends) {
    if (s.transfer.active() && s.delivered_after <= done &&
        !transport_->wait(space_, s.transfer, config_.pipeline.recv_timeout_s))
      timeout(Action{}, done);
    if (!s.transfer.active() && s.detached.data() != nullptr) {
      spare_buffers_.push_back(s.detached);
      s.detached = View2<T>();
    }
  }
}

template <class T> void Trainer<T>::post_receive(StepState& st, std::size_t i) {
  const Action& a = actions_[i];
  if (st.posted[i]) return;
  // A receive is posted ahead, possibly before its micro-batch has a slot here: it lands in a spare, which
  // the forward (activation) or backward (gradient) that uses it swaps into the slot. So a receive in
  // flight holds one [N, C] buffer, never a whole stash slot.
  auto& arrived = a.op == Op::recv_activation ? st.arrived_activation : st.arrived_gradient;
  const View2<T> buffer = arrived[a.chunk][a.microbatch] = take_spare();
  const auto message = schedule::message_of(schedule_, grid_.stage, a);
  st.recv[i] = transport_->recv(space_, buffer.data(), buffer.span() * sizeof(T), a.peer,
                                schedule::message_tag(schedule_, message));
  st.posted[i] = true;
}

template <class T> void Trainer<T>::wait_receive(StepState& st, std::size_t i) {
  post_receive(st, i);
  if (!transport_->wait(space_, st.recv[i], config_.pipeline.recv_timeout_s))
    timeout(actions_[i], i);
}

template <class T> void Trainer<T>::timeout(const Action& a, std::size_t index) const {
  // A peer that never answers: say who waited for what, then take every rank down (no silent hang).
  std::fprintf(stderr, "kpipe: rank %d (stage %d, replica %d) step %lld position %zu (%s): no message within "
                       "pipeline.recv_timeout_s = %g s; aborting\n",
               grid_.world_rank, grid_.stage, grid_.replica, static_cast<long long>(step_), index,
               schedule::to_token(a, schedule_.chunks).c_str(), config_.pipeline.recv_timeout_s);
  std::fflush(stderr);
  MPI_Abort(grid_.world, 3);
  std::abort();
}

template <class T> void Trainer<T>::run_action(StepState& st, std::size_t i) {
  const auto& list = actions_;
  const Action& a = list[i];
  const int c = a.chunk, mb = a.microbatch;
  const int vstage = schedule_.virtual_stage(grid_.stage, c);
  const bool local_next = vstage + 1 < schedule_.virtual_stages() && schedule_.rank_of(vstage + 1) == grid_.stage;
  const bool local_prev = vstage > 0 && schedule_.rank_of(vstage - 1) == grid_.stage;
  const T loss_scale = T(1.0 / (double(config_.train.batch) * config_.model.seq_len));

  if (schedule::is_compute(a.op) && !transport_->stream_ordered()) {
    // Post the receives the next compute action will need, so that they arrive while this one runs. (Not on
    // a stream-ordered transport: a receive posted ahead would hold the stream until its data arrived.)
    std::size_t j = i + 1;
    while (j < list.size() && !schedule::is_compute(list[j].op)) ++j;
    for (std::size_t k = i + 1; k < list.size() && k <= j + 2; ++k)
      if (schedule::is_recv(list[k].op)) post_receive(st, k);
  }
  const double start = now();
  // Consecutive messages go out as one group (NCCL: a pair of ranks sending to each other cannot deadlock;
  // schedule/stream_order.hpp proves the groups safe). MPI posts never block: the calls do nothing there.
  const bool comm_action = schedule::is_comm(a.op);
  if (comm_action && (i == 0 || !schedule::is_comm(list[i - 1].op))) transport_->begin_group();
  const std::size_t timed = schedule::is_compute(a.op) ? clock_.begin(space_) : 0;
  switch (a.op) {
    case Op::recv_activation:
    case Op::recv_gradient: wait_receive(st, i); break;
    case Op::send_activation:
    case Op::send_gradient: {
      auto& chunk = *chunks_[c];
      const int slot = st.slot[c][mb];
      const View2<T>& buffer = a.op == Op::send_activation ? chunk.output(slot) : chunk.input_grad(slot);
      // The transport orders the send after the kernels queued so far (they complete the buffer).
      st.sends.push_back({c, slot, a.op == Op::send_gradient, delivered_after_[i],
                          transport_->send(space_, buffer.data(), buffer.span() * sizeof(T), a.peer,
                                           schedule::message_tag(schedule_, schedule::message_of(schedule_, grid_.stage, a))),
                          {}});
      break;
    }
    case Op::forward: {
      auto& chunk = *chunks_[c];
      const int slot = slot_for(st, c, mb);
      move_in(st.arrived_activation[c][mb], [&](View2<T>& b) { chunk.swap_input(slot, b); });
      if (chunk.first() || chunk.last()) load_tokens(c, slot, mb);
      chunk.forward(space_, slot);
      if (chunk.last())  // left on the device: read once at the step's end
        chunk.loss_sum(space_, slot, Kokkos::subview(loss_sums_, grid_.replica * local_microbatches_ + mb));
      peak_stash_ = std::max(peak_stash_, ++stash_);
      if (local_next) {  // the next virtual stage is ours too (one rank, several chunks): hand over in place
        const int next = slot_for(st, c + 1, mb);
        Kokkos::deep_copy(space_, chunks_[c + 1]->input(next), chunk.output(slot));
      }
      break;
    }
    case Op::backward:
    case Op::backward_input: {
      auto& chunk = *chunks_[c];
      const int slot = st.slot[c][mb];
      move_in(st.arrived_gradient[c][mb], [&](View2<T>& b) { chunk.swap_output_grad(slot, b); });
      chunk.backward_input(space_, slot, loss_scale);
      if (local_prev)
        Kokkos::deep_copy(space_, chunks_[c - 1]->output_grad(st.slot[c - 1][mb]), chunk.input_grad(slot));
      if (a.op == Op::backward) {
        chunk.backward_weight(space_, slot);
        --stash_;
      }
      break;
    }
    case Op::backward_weight: {
      chunks_[c]->backward_weight(space_, st.slot[c][mb]);
      --stash_;
      break;
    }
    case Op::step: break;  // after the list: see step()
  }
  if (comm_action && (i + 1 == list.size() || !schedule::is_comm(list[i + 1].op))) transport_->end_group();
  if (comm_action) {  // host time of posting (and, for receives, of waiting)
    const auto& chunk = *chunks_[c];
    timeline_.push_back({a, start - st.start, now() - st.start, chunk.rows() * chunk.channels() * std::int64_t(sizeof(T))});
  }
  if (schedule::is_compute(a.op)) {  // no fence: the span is read from the stream at the step's end
    clock_.end(space_, timed);
    timeline_.push_back({a, 0, 0, 0});
    st.timed.push_back(timeline_.size() - 1);
  }
  if (observer_ && schedule::is_compute(a.op)) observer_(a, st.slot[c][mb]);
  reclaim(st, i);
  if (st.last_touch[i]) retire(st, c, mb);
}

template <class T> StepStats Trainer<T>::step() {
  if (step_ == 0 && test_stall_seconds_ > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(test_stall_seconds_));
  const double start = now();
  const auto& list = actions_;
  StepState st;
  st.start = start;
  timeline_.clear();
  stage_tokens(step_);
  clock_.start(space_);
  st.slot.assign(chunks_.size(), std::vector<int>(local_microbatches_, -1));
  st.arrived_activation.assign(chunks_.size(), std::vector<View2<T>>(local_microbatches_));
  st.arrived_gradient.assign(chunks_.size(), std::vector<View2<T>>(local_microbatches_));
  st.recv.assign(list.size(), comm::Transfer{});
  st.posted.assign(list.size(), false);
  st.last_touch.assign(list.size(), false);
  {
    std::vector<std::vector<bool>> seen(chunks_.size(), std::vector<bool>(local_microbatches_, false));
    for (std::size_t i = list.size(); i-- > 0;) {
      const Action& a = list[i];
      if (a.op == Op::step || seen[a.chunk][a.microbatch]) continue;
      seen[a.chunk][a.microbatch] = st.last_touch[i] = true;
    }
  }
  st.loss_sums.assign(config_.train.microbatches, 0.0);
  Kokkos::deep_copy(space_, loss_sums_, 0.0);  // micro-batches whose loss is elsewhere count 0
  for (std::size_t i = 0; i < deferred_from_; ++i) run_action(st, i);
  if (grid_.data_parallel > 1 && config_.pipeline.dp_reduction == "ordered" && grid_.replica > 0) {
    // The previous replica's gradient sum arrives, then this replica's weight gradients add onto it.
    for (auto& chunk : chunks_) {
      const auto& g = chunk->params().grads();
      comm::Transfer r = replica_transport_->recv(space_, g.data(), g.span() * sizeof(T), grid_.replica - 1, 0);
      if (!replica_transport_->wait(space_, r, config_.pipeline.recv_timeout_s)) timeout(Action{}, deferred_from_);
    }
  }
  for (std::size_t i = deferred_from_; i < list.size(); ++i) run_action(st, i);
  reclaim(st, list.size());
  // Stream-ordered transfers: the host learns here, with a bound, that the stream got through them.
  if (transport_->stream_ordered() && !transport_->synchronize(space_, config_.pipeline.recv_timeout_s))
    timeout(Action{}, list.size());
  read_action_times(st);  // waits for the stream to finish the step's last compute action
  Kokkos::deep_copy(Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(st.loss_sums.data(),
                                                                                             st.loss_sums.size()),
                    loss_sums_);
  const double pipeline_end = now();
  if (grid_.data_parallel > 1) reduce_across_replicas();

  StepStats stats;
  stats.pipeline_seconds = pipeline_end - start;
  stats.step = step_;
  stats.tokens = std::int64_t(config_.train.batch) * config_.model.seq_len;
  // Each micro-batch's loss lives on one rank, zeros elsewhere: the sum is exact, then added in order.
  MPI_Allreduce(MPI_IN_PLACE, st.loss_sums.data(), int(st.loss_sums.size()), MPI_DOUBLE, MPI_SUM, grid_.world);
  double loss = 0;
  for (double l : st.loss_sums) loss += l;
  stats.loss = loss / double(stats.tokens);
  optimizer_step(stats);  // skips the update when the loss or the gradient is not finite
  space_.fence();
  stats.busy_seconds = st.busy;
  stats.seconds = now() - start;
  ++step_;
  return stats;
}

// Every replica's gradient sum becomes the same total. "ordered": the running sum passes down the replicas
// (each added its weight gradients onto the previous one's, see step()), then the last replica's is
// broadcast; "allreduce": one all-reduce. Both through the replica transport, on the stream.
template <class T> void Trainer<T>::reduce_across_replicas() {
  const double limit = config_.pipeline.recv_timeout_s;
  const bool ordered = config_.pipeline.dp_reduction == "ordered";
  for (auto& chunk : chunks_) {
    const auto& g = chunk->params().grads();
    if (ordered && grid_.replica + 1 < grid_.data_parallel) {
      comm::Transfer sent = replica_transport_->send(space_, g.data(), g.span() * sizeof(T), grid_.replica + 1, 0);
      if (!replica_transport_->wait(space_, sent, limit)) timeout(Action{}, actions_.size());
    }
    comm::Transfer total =
        ordered ? replica_transport_->broadcast(space_, g.data(), g.span(), comm::scalar_of<T>(), grid_.data_parallel - 1)
                : replica_transport_->all_reduce_sum(space_, g.data(), g.span(), comm::scalar_of<T>());
    if (!replica_transport_->wait(space_, total, limit)) timeout(Action{}, actions_.size());
  }
  if (replica_transport_->stream_ordered() && !replica_transport_->synchronize(space_, limit))
    timeout(Action{}, actions_.size());
}

template <class T> void Trainer<T>::optimizer_step(StepStats& stats) {
  // Global norm from per-layer sums placed by global layer index, so it is the same on every layout.
  std::vector<double> squares(desc_.layers.size(), 0.0);
  for (auto& chunk : chunks_) {
    const auto sums = layer_grad_squares(space_, chunk->params());
    for (std::size_t k = 0; k < sums.size(); ++k) squares[chunk->params().first_layer() + k] = sums[k];
  }
  MPI_Allreduce(MPI_IN_PLACE, squares.data(), int(squares.size()), MPI_DOUBLE, MPI_SUM, grid_.pipeline);
  double total = 0;
  for (double s : squares) total += s;
  stats.grad_norm = std::sqrt(total);
  stats.lr = nn::learning_rate(config_.optim, step_, config_.train.steps);
  // Every rank sees the same loss and norm, so every rank skips alike.
  if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    for (auto& chunk : chunks_) chunk->params().zero_grads(space_);
    return;
  }
  const double scale = nn::clip_factor(stats.grad_norm, config_.optim.grad_clip);
  for (auto& chunk : chunks_) {
    auto& p = chunk->params();
    if (config_.optim.kind == "sgd")
      nn::sgd_update(space_, config_.optim, stats.lr, scale, p.values(), p.grads(), p.moment1(), p.decay_mask());
    else
      nn::adamw_update(space_, config_.optim, stats.lr, step_ + 1, scale, p.values(), p.grads(), p.moment1(),
                       p.moment2(), p.decay_mask());
    p.zero_grads(space_);
  }
}

template <class T> std::array<double, 4> Trainer<T>::mean_action_seconds(int chunk) const {
  std::array<double, 4> mean{};
  const auto& seconds = action_seconds_.at(chunk);
  const auto& count = action_count_.at(chunk);
  for (int k = 0; k < 4; ++k) mean[k] = count[k] > 0 ? seconds[k] / double(count[k]) : 0.0;
  return mean;
}

template <class T> double Trainer<T>::evaluate() {
  // Forward only, one micro-batch at a time down the virtual stages: a chain, so blocking messages are safe.
  const int seq = config_.model.seq_len, mb = sequences_per_microbatch_;
  const std::int64_t available = data::validation_windows(std::int64_t(corpus_->validation.size()), seq);
  std::int64_t windows =
      std::min<std::int64_t>(available, std::int64_t(config_.train.eval_batches) * config_.train.batch);
  windows -= windows % mb;
  if (windows == 0) return std::nan("");
  std::vector<int> slots;
  for (auto& chunk : chunks_) slots.push_back(chunk->acquire());
  double loss_sum = 0;
  const int vstages = schedule_.virtual_stages();
  for (std::int64_t w = grid_.replica * mb; w < windows; w += std::int64_t(mb) * grid_.data_parallel) {
    data::fill_validation_windows(corpus_->validation, w, mb, seq, host_inputs_.data(), host_targets_.data());
    for (int v = 0; v < vstages; ++v) {
      if (schedule_.rank_of(v) != grid_.stage) continue;
      const int c = schedule_.chunk_of(v);
      auto& chunk = *chunks_[c];
      const int slot = slots[c];
      load_tokens(c, slot, 0);  // staging row 0 holds the window (refilled after the fence below)
      if (v > 0) {
        const int prev = schedule_.rank_of(v - 1);
        if (prev == grid_.stage)
          Kokkos::deep_copy(space_, chunk.input(slot), chunks_[c - 1]->output(slots[c - 1]));
        else {
          comm::Transfer r = transport_->recv(space_, chunk.input(slot).data(), chunk.input(slot).span() * sizeof(T), prev, v);
          if (!transport_->wait(space_, r, config_.pipeline.recv_timeout_s))
            timeout(Action{Op::recv_activation, 0, c, prev}, 0);
        }
      }
      chunk.forward(space_, slot);
      // A fence, bounded: on a stream-ordered transport (NCCL) a receive that never comes holds the stream.
      if (!transport_->synchronize(space_, config_.pipeline.recv_timeout_s))
        timeout(Action{Op::recv_activation, 0, c, v > 0 ? schedule_.rank_of(v - 1) : grid_.stage}, 0);
      if (chunk.last())
        loss_sum += chunk.loss_sum(space_, slot);
      else if (schedule_.rank_of(v + 1) != grid_.stage) {
        comm::Transfer r = transport_->send(space_, chunk.output(slot).data(), chunk.output(slot).span() * sizeof(T),
                                            schedule_.rank_of(v + 1), v + 1);
        if (!transport_->wait(space_, r, config_.pipeline.recv_timeout_s))
          timeout(Action{Op::send_activation, 0, c, -1}, 0);
      }
    }
  }
  for (std::size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->release(slots[c]);
  MPI_Allreduce(MPI_IN_PLACE, &loss_sum, 1, MPI_DOUBLE, MPI_SUM, grid_.world);
  return loss_sum / double(windows * seq);
}

template <class T> std::uint64_t Trainer<T>::param_checksum() const {
  // Each tensor's hash sits at its global position, zeros elsewhere; a sum over ranks assembles the list.
  std::vector<std::int64_t> first_tensor(desc_.layers.size() + 1, 0);
  for (std::size_t l = 0; l < desc_.layers.size(); ++l)
    first_tensor[l + 1] = first_tensor[l] + std::int64_t(desc_.layers[l].params.size());
  std::vector<std::uint64_t> hashes(first_tensor.back(), 0);
  for (const auto& chunk : chunks_) {
    const auto own = model::tensor_hashes(chunk->params());
    const auto& slots = chunk->params().slots();
    int index_in_layer = 0;
    for (std::size_t k = 0; k < own.size(); ++k) {
      index_in_layer = (k > 0 && slots[k].layer == slots[k - 1].layer) ? index_in_layer + 1 : 0;
      hashes[first_tensor[slots[k].layer] + index_in_layer] = own[k];
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, hashes.data(), int(hashes.size()), MPI_UINT64_T, MPI_SUM, grid_.pipeline);
  return model::combine_hashes(hashes);
}

template <class T>
std::vector<double> layer_grad_squares(const ExecSpace& space, const model::ParameterStore<T>& store) {
  std::vector<double> sums;
  for (int l = store.first_layer(); l < store.last_layer(); ++l) {
    const auto [offset, length] = store.layer_range(l);
    const View1<const T> grads(store.grads().data() + offset, length);
    sums.push_back(nn::sum_squares<T>(space, grads));
  }
  return sums;
}

template class Trainer<float>;
template class Trainer<double>;
template std::vector<double> layer_grad_squares(const ExecSpace&, const model::ParameterStore<float>&);
template std::vector<double> layer_grad_squares(const ExecSpace&, const model::ParameterStore<double>&);

}  // namespace kpipe::runtime
