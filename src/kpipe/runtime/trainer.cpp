#include "kpipe/runtime/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/partition/partition.hpp"
#include "kpipe/schedule/delivery.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::runtime {

using schedule::Action;
using schedule::Op;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Every collective waits at most pipeline.recv_timeout_s (comm/bounded.hpp); `what` names it if it does not end.
comm::Bound bound(const Config& c, std::int64_t step, const char* what) {
  return {c.pipeline.recv_timeout_s, fmt::format("{} of step {}", what, step)};
}

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
  std::vector<comm::Request> recv;                // per action index
  std::vector<bool> posted;                       // per action index
  // A send in flight reads its slot's buffer, or, once the slot has been retired, the buffer it took along.
  struct PendingSend {
    int chunk, slot;
    bool gradient;
    std::size_t delivered_after;
    comm::Request request;
    View2<T> detached;  // empty while the send reads from its slot
    bool reads_slot(int c, int s) const { return chunk == c && slot == s && detached.data() == nullptr; }
  };
  std::vector<PendingSend> sends;
  // [chunk][micro-batch]: an activation or gradient received into a spare, until its F or B moves it in
  std::vector<std::vector<View2<T>>> arrived_activation, arrived_gradient;
  std::vector<bool> last_touch;                   // per action index: the last use of its (chunk, micro-batch)
  std::vector<double> loss_sums;                  // per global micro-batch (last stage only)
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
  transport_ = comm::make_transport(grid.pipeline);
  replica_transport_ = comm::make_transport(grid.replicas);
  const auto rows = std::int64_t(sequences_per_microbatch_) * config.model.seq_len;
  host_inputs_ = Kokkos::View<Token*, HostSpace>(uninitialized("kpipe::runtime::Trainer::host_inputs"), rows);
  host_targets_ = Kokkos::View<Token*, HostSpace>(uninitialized("kpipe::runtime::Trainer::host_targets"), rows);
}

template <class T> Trainer<T>::~Trainer() = default;

template <class T> void Trainer<T>::load_tokens(int c, int slot, std::int64_t step, int microbatch) {
  auto& chunk = *chunks_[c];
  const int global_mb = grid_.replica * local_microbatches_ + microbatch;
  data::fill_train_windows(corpus_->train, config_.train.seed, step, global_mb * sequences_per_microbatch_,
                           sequences_per_microbatch_, config_.model.seq_len, host_inputs_.data(), host_targets_.data());
  if (chunk.first()) Kokkos::deep_copy(space_, chunk.tokens(slot), host_inputs_);
  if (chunk.last()) Kokkos::deep_copy(space_, chunk.targets(slot), host_targets_);
  space_.fence();  // the host buffers are refilled for the next micro-batch
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
    if (!send.reads_slot(c, slot) || !send.request.active()) continue;
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
    if (s.request.active() && s.delivered_after <= done &&
        !transport_->wait(s.request, config_.pipeline.recv_timeout_s))
      timeout(Action{}, done);
    if (!s.request.active() && s.detached.data() != nullptr) {
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
  transport_->recv(buffer.data(), buffer.span() * sizeof(T), a.peer, schedule::message_tag(schedule_, message),
                   st.recv[i]);
  st.posted[i] = true;
}

template <class T> void Trainer<T>::wait_receive(StepState& st, std::size_t i) {
  post_receive(st, i);
  if (!transport_->wait(st.recv[i], config_.pipeline.recv_timeout_s))
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

  if (schedule::is_compute(a.op)) {
    // Post the receives the next compute action will need, so that they arrive while this one runs.
    std::size_t j = i + 1;
    while (j < list.size() && !schedule::is_compute(list[j].op)) ++j;
    for (std::size_t k = i + 1; k < list.size() && k <= j + 2; ++k)
      if (schedule::is_recv(list[k].op)) post_receive(st, k);
  }
  const double start = now();
  switch (a.op) {
    case Op::recv_activation:
    case Op::recv_gradient: wait_receive(st, i); break;
    case Op::send_activation:
    case Op::send_gradient: {
      auto& chunk = *chunks_[c];
      const int slot = st.slot[c][mb];
      const View2<T>& buffer = a.op == Op::send_activation ? chunk.output(slot) : chunk.input_grad(slot);
      space_.fence();  // the buffer is complete before MPI reads it
      st.sends.push_back({c, slot, a.op == Op::send_gradient, delivered_after_[i], {}, {}});
      transport_->send(buffer.data(), buffer.span() * sizeof(T), a.peer,
                       schedule::message_tag(schedule_, schedule::message_of(schedule_, grid_.stage, a)),
                       st.sends.back().request);
      break;
    }
    case Op::forward: {
      auto& chunk = *chunks_[c];
      const int slot = slot_for(st, c, mb);
      move_in(st.arrived_activation[c][mb], [&](View2<T>& b) { chunk.swap_input(slot, b); });
      if (chunk.first() || chunk.last()) load_tokens(c, slot, step_, mb);
      chunk.forward(space_, slot);
      if (chunk.last()) st.loss_sums[grid_.replica * local_microbatches_ + mb] = chunk.loss_sum(space_, slot);
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
  if (schedule::is_comm(a.op)) {
    const auto& chunk = *chunks_[c];
    timeline_.push_back({a, start - st.start, now() - st.start, chunk.rows() * chunk.channels() * std::int64_t(sizeof(T))});
  }
  if (schedule::is_compute(a.op)) {
    space_.fence();
    const double seconds = now() - start;
    timeline_.push_back({a, start - st.start, start - st.start + seconds, 0});
    st.busy += seconds;
    if (step_ > 0) {  // the first step allocates the stash: not representative
      action_seconds_[c][int(a.op)] += seconds;
      ++action_count_[c][int(a.op)];
    }
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
  st.slot.assign(chunks_.size(), std::vector<int>(local_microbatches_, -1));
  st.arrived_activation.assign(chunks_.size(), std::vector<View2<T>>(local_microbatches_));
  st.arrived_gradient.assign(chunks_.size(), std::vector<View2<T>>(local_microbatches_));
  st.recv.assign(list.size(), comm::Request{});
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
  for (std::size_t i = 0; i < deferred_from_; ++i) run_action(st, i);
  if (grid_.data_parallel > 1 && config_.pipeline.dp_reduction == "ordered" && grid_.replica > 0) {
    // The previous replica's gradient sum arrives, then this replica's weight gradients add onto it.
    for (auto& chunk : chunks_) {
      const auto& g = chunk->params().grads();
      comm::Request r;
      replica_transport_->recv(g.data(), g.span() * sizeof(T), grid_.replica - 1, 0, r);
      if (!replica_transport_->wait(r, config_.pipeline.recv_timeout_s)) timeout(Action{}, deferred_from_);
    }
  }
  for (std::size_t i = deferred_from_; i < list.size(); ++i) run_action(st, i);
  reclaim(st, list.size());
  const double pipeline_end = now();
  if (grid_.data_parallel > 1) reduce_across_replicas();

  StepStats stats;
  stats.pipeline_seconds = pipeline_end - start;
  stats.step = step_;
  stats.tokens = std::int64_t(config_.train.batch) * config_.model.seq_len;
  // Each micro-batch's loss lives on one rank, zeros elsewhere: the sum is exact, then added in order.
  comm::allreduce(st.loss_sums, MPI_SUM, grid_.world, bound(config_, step_, "the loss allreduce"));
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

template <class T> void Trainer<T>::reduce_across_replicas() {
  const auto type = comm::mpi_type<T>();
  space_.fence();
  for (auto& chunk : chunks_) {
    const auto& g = chunk->params().grads();
    const int count = int(g.span());
    if (config_.pipeline.dp_reduction == "ordered" && grid_.replica + 1 < grid_.data_parallel) {
      // The running sum goes on to the next replica; the last one's becomes everyone's below.
      comm::Request r;
      replica_transport_->send(g.data(), g.span() * sizeof(T), grid_.replica + 1, 0, r);
      if (!replica_transport_->wait(r, config_.pipeline.recv_timeout_s)) timeout(Action{}, actions_.size());
    }
    // Collectives read the buffer where MPI can (host, CUDA-aware MPI), else a host copy of it.
    auto collective = [&](T* data) {
      if (config_.pipeline.dp_reduction == "ordered")
        comm::bcast(data, count, type, grid_.data_parallel - 1, grid_.replicas,
                    bound(config_, step_, "the broadcast of the replicas' gradient sum"));
      else
        comm::allreduce(data, count, type, MPI_SUM, grid_.replicas,
                        bound(config_, step_, "the allreduce of the replicas' gradients"));
    };
#if defined(KPIPE_CUDA_AWARE_MPI)
    collective(g.data());
#else
    if constexpr (Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible) {
      collective(g.data());
    } else {
      auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), g);
      collective(host.data());
      Kokkos::deep_copy(g, host);
    }
#endif
  }
}

template <class T> void Trainer<T>::optimizer_step(StepStats& stats) {
  // Global norm from per-layer sums placed by global layer index, so it is the same on every layout.
  std::vector<double> squares(desc_.layers.size(), 0.0);
  for (auto& chunk : chunks_) {
    const auto sums = layer_grad_squares(space_, chunk->params());
    for (std::size_t k = 0; k < sums.size(); ++k) squares[chunk->params().first_layer() + k] = sums[k];
  }
  comm::allreduce(squares, MPI_SUM, grid_.pipeline, bound(config_, step_, "the gradient-norm allreduce"));
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
      if (chunk.first()) Kokkos::deep_copy(space_, chunk.tokens(slot), host_inputs_);
      if (chunk.last()) Kokkos::deep_copy(space_, chunk.targets(slot), host_targets_);
      if (v > 0) {
        const int prev = schedule_.rank_of(v - 1);
        if (prev == grid_.stage)
          Kokkos::deep_copy(space_, chunk.input(slot), chunks_[c - 1]->output(slots[c - 1]));
        else {
          comm::Request r;
          transport_->recv(chunk.input(slot).data(), chunk.input(slot).span() * sizeof(T), prev, v, r);
          if (!transport_->wait(r, config_.pipeline.recv_timeout_s)) timeout(Action{Op::recv_activation, 0, c, prev}, 0);
        }
      }
      chunk.forward(space_, slot);
      space_.fence();
      if (chunk.last())
        loss_sum += chunk.loss_sum(space_, slot);
      else if (schedule_.rank_of(v + 1) != grid_.stage) {
        comm::Request r;
        transport_->send(chunk.output(slot).data(), chunk.output(slot).span() * sizeof(T), schedule_.rank_of(v + 1),
                         v + 1, r);
        if (!transport_->wait(r, config_.pipeline.recv_timeout_s)) timeout(Action{Op::send_activation, 0, c, -1}, 0);
      }
    }
  }
  for (std::size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->release(slots[c]);
  loss_sum = comm::allreduce(loss_sum, MPI_SUM, grid_.world, bound(config_, step_, "the validation-loss allreduce"));
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
  comm::allreduce(hashes, MPI_SUM, grid_.pipeline, bound(config_, step_, "the param_checksum allreduce"));
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
