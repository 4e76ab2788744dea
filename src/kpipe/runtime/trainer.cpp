#include "kpipe/runtime/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <thread>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/memory/limit.hpp"
#include "kpipe/runtime/buffers.hpp"
#include "kpipe/runtime/gradient_reduction.hpp"
#include "kpipe/runtime/weight_versions.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/runtime/placement.hpp"
#include "kpipe/schedule/configured.hpp"
#include "kpipe/schedule/validate.hpp"
#include "kpipe/schedule/stream_order.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::runtime {

using schedule::Action;
using schedule::Op;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Every collective waits at most pipeline.recv_timeout_s (comm/bounded.hpp); `what` names it if it does not end.
comm::Bound bound(const Config& c, std::int64_t step, const char* what) {
  return {c.pipeline.recv_timeout_s, fmt::format("{} of step {}", what, step)};
}

}  // namespace

// Where one step stands on this rank (the buffers are the Buffers' business).
template <class T> struct Trainer<T>::StepState {
  std::vector<comm::Transfer> recv;               // per action index
  std::vector<bool> posted;                       // per action index
  std::vector<double> loss_sums;                  // per global micro-batch (last stage only)
  int shift = 0;                                  // asynchronous: steps the lists' step run is shifted by
  std::vector<double> update_squares;             // asynchronous: per chunk, its last update's squared norm
  double lr = 0;                                  // asynchronous: the last update's
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
  replicated_ = schedule::configured_schedule(config);
  asynchronous_ = replicated_.replicas.front().asynchronous();
  if (asynchronous_) {
    rules_ = AsyncRules::of(config);
    // Stream-ordered transports (NCCL) need every transfer's order proved per pair of ranks for the
    // whole run; the asynchronous lists' messages cross step boundaries, which that proof does not cover.
    require(default_transport(pc) == "mpi" && std::getenv("KPIPE_TEST_TRANSPORT") == nullptr,
            "pipeline.transport = \"{}\" with pipeline.schedule = \"{}\": asynchronous schedules run over MPI "
            "only in this version (\"auto\" picks MPI for them)", pc.transport, pc.schedule);
  }
  // The transport ("auto" resolved as runtime/placement.hpp does without looking at the node). NCCL runs
  // transfers in stream order exactly where the lists put them: every replica's schedule goes through the
  // pass that arranges its receives for that, and what runs (the pipelines' messages and the ordered
  // reduction's running sums together) must be proved to match in order per pair of ranks and to be free of
  // deadlocks under NCCL's blocking semantics (schedule/stream_order.hpp). The running sums go on the stream
  // where that proof holds; where a sum on the stream would close a cycle (a replica's blocked send holding
  // up its own pipeline), they go by MPI from the host, proved for that instead.
  // Test hook: KPIPE_TEST_TRANSPORT=mpi-stream-ordered runs MPI with NCCL's semantics
  // (comm/stream_ordered_mpi.hpp), so that CPU tests run the NCCL path end to end.
  std::string transport = default_transport(pc);
  if (const char* kind = std::getenv("KPIPE_TEST_TRANSPORT")) transport = kind;
  std::string sums = transport;  // what the replicas' gradient sums travel by
  if (transport == "nccl" || transport == "mpi-stream-ordered") {
    replicated_ = schedule::order_for_streams(replicated_);
    schedule::validate(replicated_);
    if (replicated_.ordered) {
      try {
        schedule::validate_stream_order(replicated_, schedule::SumTransport::stream);
      } catch (const InputError&) {
        schedule::validate_stream_order(replicated_, schedule::SumTransport::mpi);
        sums = "mpi";
      }
    } else {
      schedule::validate_stream_order(replicated_);
    }
  }
  schedule_ = replicated_.replicas.at(grid.replica);
  actions_ = schedule_.actions[grid.stage];
  plan_ = schedule::plan_buffers(schedule_, grid.stage, actions_);
  // Before any allocation: every rank's predicted memory against the limit (the same verdict on every rank).
  memory::enforce_limit(config, desc_, replicated_, grid.world);

  // The balanced partition weighs each stage's memory with what the schedule keeps in flight there; the
  // memory plan (and the limit just enforced) used the same partition.
  const auto ranges = partition::configured_partition(config, desc_, replicated_);
  const nn::Recompute recompute = nn::parse_recompute(config.memory.recompute);
  std::vector<model::Chunk<T>*> chunks;
  for (int c = 0; c < pc.chunks; ++c) {
    const auto& r = ranges.at(schedule_.virtual_stage(grid.stage, c));
    chunks_.push_back(std::make_unique<model::Chunk<T>>(desc_, r.first, r.last, sequences_per_microbatch_, recompute));
    chunks_.back()->params().initialize(space_, tc.seed);
    chunks.push_back(chunks_.back().get());
  }
  // Asynchronous lists number micro-batches over many steps; the buffers know them modulo the tag period
  // (more than are ever in flight at once).
  buffers_ = std::make_unique<Buffers<T>>(chunks, asynchronous_ ? schedule::tag_period(schedule_) : local_microbatches_);
  if (asynchronous_) {
    template_step_ = schedule::Horizon{schedule_.ranks, schedule_.microbatches}.template_step();
    step_ranges_ = schedule::step_ranges(actions_);
    for (auto& chunk : chunks_) versions_.push_back(std::make_unique<WeightVersions<T>>(space_, chunk->params()));
    in_flight_.resize(chunks_.size());
    next_forward_.assign(chunks_.size(), 0);
  }
  if (const char* stall = std::getenv("KPIPE_TEST_STALL")) {
    int rank = -1;
    double seconds = 0;
    if (std::sscanf(stall, "%d:%lf", &rank, &seconds) == 2 && rank == grid.world_rank) test_stall_seconds_ = seconds;
  }
  action_seconds_.assign(chunks_.size(), {});
  action_count_.assign(chunks_.size(), {});
  transport_ = comm::make_transport(transport, grid.pipeline, pc.recv_timeout_s);
  reduction_ = std::make_unique<GradientReduction<T>>(grid_, replicated_, sums, pc.recv_timeout_s,
                                                      [this](const Action& a) { timeout(a, actions_.size()); });
  if (asynchronous_) reduction_->reserve_update_sums(space_, chunks, pc.dp_reduction == "ordered");
  const auto rows = std::int64_t(sequences_per_microbatch_) * config.model.seq_len;
  memory::Scope scope(memory::Category::workspaces);  // memory/plan.cpp counts these three
  // Asynchronous schedules: a step forwards up to m + p - 1 consecutive micro-batches (the first one, its
  // warm-up too), each with its own row.
  staging_rows_ = asynchronous_ ? local_microbatches_ + pc.pipeline_size - 1 : local_microbatches_;
  host_inputs_ = decltype(host_inputs_)(uninitialized("kpipe::runtime::Trainer::host_inputs"), staging_rows_, rows);
  host_targets_ = decltype(host_targets_)(uninitialized("kpipe::runtime::Trainer::host_targets"), staging_rows_, rows);
  loss_sums_ = Kokkos::View<double*, MemSpace>("kpipe::runtime::Trainer::loss_sums", tc.microbatches);
}

template <class T> Trainer<T>::~Trainer() = default;

template <class T> int Trainer<T>::message_buffers() const { return buffers_->message_buffers(); }

// Every micro-batch's windows of the step into the staging rows, where a chunk on this rank reads tokens.
template <class T> void Trainer<T>::stage_tokens(std::int64_t step) {
  if (std::none_of(chunks_.begin(), chunks_.end(), [](const auto& c) { return c->first() || c->last(); })) return;
  for (int mb = 0; mb < local_microbatches_; ++mb)
    data::fill_train_windows(corpus_->train, config_.train.seed, step, global_microbatch(mb) * sequences_per_microbatch_,
                             sequences_per_microbatch_, config_.model.seq_len, &host_inputs_(mb, 0),
                             &host_targets_(mb, 0));
}

// Asynchronous schedules: the windows of the micro-batches this step forwards (rows micro-batch mod
// staging_rows_: a step forwards at most m + p - 1 consecutive micro-batches), each drawn as async_rules.hpp
// says.
template <class T> void Trainer<T>::stage_async_tokens(const StepState& st, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    const Action a = action_at(st, i);
    if (a.op != Op::forward || !(chunks_[a.chunk]->first() || chunks_[a.chunk]->last())) continue;
    const int row = a.microbatch % staging_rows_;
    data::fill_train_windows(corpus_->train, config_.train.seed, rules_.sampler_step(a.microbatch),
                             rules_.first_sequence(a.microbatch, grid_.replica), sequences_per_microbatch_, config_.model.seq_len,
                             &host_inputs_(row, 0), &host_targets_(row, 0));
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

// A receive is posted ahead, possibly before its micro-batch has a slot here: it lands in a spare, which the
// forward (activation) or backward (gradient) that uses it swaps into the slot. So a receive in flight holds
// one [N, C] buffer, never a whole stash slot.
template <class T> Action Trainer<T>::action_at(const StepState& st, std::size_t i) const {
  Action a = st.shift == 0 ? actions_[i] : schedule::shifted(actions_[i], schedule_, st.shift, 0);
  // A resumed run's lists number micro-batches and versions from the resume; versions below the run's
  // first are the initial weights (the rule's max(0, ...)).
  if (base_microbatch_ == 0 && base_version_ == 0) return a;
  if (a.op == Op::step) return a;
  a.microbatch += int(base_microbatch_);
  if (a.op == Op::update) a.version += base_version_;
  else if (schedule::is_compute(a.op)) a.version = std::max(0, a.version + base_version_);
  return a;
}

template <class T> void Trainer<T>::post_receive(StepState& st, std::size_t i) {
  const Action a = action_at(st, i);
  if (st.posted[i]) return;
  const View2<T> buffer = buffers_->receive_buffer(a.chunk, a.microbatch, a.op == Op::recv_gradient);
  const auto message = schedule::message_of(schedule_, grid_.stage, a);
  st.recv[i] = transport_->recv(space_, buffer.data(), buffer.span() * sizeof(T), a.peer,
                                schedule::message_tag(schedule_, message));
  st.posted[i] = true;
}

template <class T> void Trainer<T>::wait_receive(StepState& st, std::size_t i) {
  post_receive(st, i);
  if (!transport_->wait(space_, st.recv[i], config_.pipeline.recv_timeout_s))
    timeout(action_at(st, i), i);
}

template <class T> void Trainer<T>::timeout(const Action& a, std::size_t index) const {
  // A peer that never answers: say who waited for what, then take every rank down (no silent hang).
  const bool send = schedule::is_send(a.op) || a.op == Op::send_sum;
  std::fprintf(stderr, "kpipe: rank %d (stage %d, replica %d) step %lld position %zu (%s): %s within "
                       "pipeline.recv_timeout_s = %g s; aborting\n",
               grid_.world_rank, grid_.stage, grid_.replica, static_cast<long long>(step_), index,
               schedule::to_token(a, schedule_.chunks).c_str(), send ? "not delivered" : "no message",
               config_.pipeline.recv_timeout_s);
  std::fflush(stderr);
  MPI_Abort(grid_.world, 3);
  std::abort();
}

template <class T> void Trainer<T>::run_action(StepState& st, std::size_t i) {
  const Action a = action_at(st, i);
  const int c = a.chunk, mb = a.microbatch;
  const int vstage = schedule_.virtual_stage(grid_.stage, c);
  // The neighbouring virtual stages' chunks when they are on this rank too (the data is handed over in place).
  const int local_prev = vstage > 0 && schedule_.rank_of(vstage - 1) == grid_.stage ? schedule_.chunk_of(vstage - 1) : -1;
  const T loss_scale = asynchronous_ ? T(rules_.loss_scale())
                                     : T(1.0 / (double(config_.train.batch) * config_.model.seq_len));

  const auto& list = actions_;
  // Receives the coming actions need, posted now so that they arrive while this one runs. (Not on a
  // stream-ordered transport: a receive posted ahead would hold the stream until its data arrived.)
  if (!transport_->stream_ordered())
    for (std::size_t k : plan_.post_before[i]) post_receive(st, k);
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
      const int slot = buffers_->slot(c, mb);
      const View2<T>& buffer = a.op == Op::send_activation ? chunk.output(slot) : chunk.input_grad(slot);
      // The transport orders the send after the kernels queued so far (they complete the buffer).
      buffers_->add_send(c, mb, a.op == Op::send_gradient, plan_.delivered_after[i]) =
          transport_->send(space_, buffer.data(), buffer.span() * sizeof(T), a.peer,
                           schedule::message_tag(schedule_, schedule::message_of(schedule_, grid_.stage, a)));
      break;
    }
    case Op::forward: {
      auto& chunk = *chunks_[c];
      if (asynchronous_) {  // the version the rule gives it, stashed for its backward
        versions_[c]->bind(a.version);
        in_flight_[c][mb] = a.version;
        next_forward_[c] = mb + 1;
      }
      const int slot = buffers_->take_slot(c, mb);
      buffers_->move_in_activation(c, mb);
      if (local_prev >= 0)  // the previous virtual stage is ours too: its output, kept in its slot, is our input
        Kokkos::deep_copy(space_, chunk.input(slot), chunks_[local_prev]->output(buffers_->slot(local_prev, mb)));
      if (chunk.first() || chunk.last()) load_tokens(c, slot, asynchronous_ ? mb % staging_rows_ : mb);
      chunk.forward(space_, slot);
      if (chunk.last())  // left on the device: read once at the step's end
        chunk.loss_sum(space_, slot,
                       Kokkos::subview(loss_sums_, asynchronous_ ? rules_.loss_index(mb, grid_.replica) : global_microbatch(mb)));
      peak_stash_ = std::max(peak_stash_, ++stash_);
      break;
    }
    case Op::backward:
    case Op::backward_input: {
      auto& chunk = *chunks_[c];
      if (asynchronous_) {  // weight stashing: its forward's version
        versions_[c]->bind(a.version);
        versions_read_.push_back({mb, in_flight_[c].at(mb), a.version});
      }
      const int slot = buffers_->slot(c, mb);
      buffers_->move_in_gradient(c, mb);
      chunk.backward_input(space_, slot, loss_scale);
      if (local_prev >= 0)
        Kokkos::deep_copy(space_, chunks_[local_prev]->output_grad(buffers_->slot(local_prev, mb)),
                          chunk.input_grad(slot));
      if (a.op == Op::backward) {
        chunk.backward_weight(space_, slot);
        --stash_;
      }
      if (asynchronous_) {
        in_flight_[c].erase(mb);
        versions_[c]->release([&](int v) { return version_needed(c, v); });
      }
      break;
    }
    case Op::backward_weight: {
      chunks_[c]->backward_weight(space_, buffers_->slot(c, mb));
      --stash_;
      break;
    }
    case Op::recv_sum: reduction_->receive(space_, *chunks_[c], a); break;
    case Op::send_sum: reduction_->send(space_, *chunks_[c], a); break;  // after the W's queued so far
    case Op::step:  // after the list: see step() (asynchronous: the step's end, see async_step())
      return;
    case Op::update: {
      // From the newest version, with the weight gradients accumulated since the last update (summed over
      // the replicas); the result is the next version.
      auto& versions = *versions_[c];
      versions.bind(versions.newest());
      const std::int64_t update = rules_.update_of(mb);
      reduction_->before_update(space_, *chunks_[c], a, update);
      st.update_squares[c] = apply_async_update(space_, config_.optim, rules_, update, chunks_[c]->params());
      st.lr = rules_.learning_rate(config_.optim, update);
      versions.commit(a.version, [&](int v) { return version_needed(c, v); });
      space_.fence();
      timeline_.push_back({a, start - st.start, now() - st.start, 0});
      st.busy += now() - start;  // work, as F and B are (the simulator charges it as `step`)
      break;
    }
  }
  if (comm_action && (i + 1 == list.size() || !schedule::is_comm(list[i + 1].op))) transport_->end_group();
  if (comm_action) {  // host time of posting (and, for receives, of waiting)
    const auto& chunk = *chunks_[c];
    timeline_.push_back({a, start - st.start, now() - st.start, chunk.rows() * chunk.channels() * std::int64_t(sizeof(T))});
  }
  if (schedule::is_reduction(a.op)) {
    const auto& grads = chunks_[c]->params().grads();
    timeline_.push_back({a, start - st.start, now() - st.start, std::int64_t(grads.span() * sizeof(T))});
  }
  if (schedule::is_compute(a.op)) {  // no fence: the span is read from the stream at the step's end
    clock_.end(space_, timed);
    timeline_.push_back({a, 0, 0, 0});
    st.timed.push_back(timeline_.size() - 1);
  }
  if (observer_ && schedule::is_compute(a.op)) observer_(a, buffers_->slot(c, mb));
  buffers_->reclaim(i, [&](comm::Transfer& transfer) {
    if (!transport_->wait(space_, transfer, config_.pipeline.recv_timeout_s)) timeout(Action{}, i);
  });
  if (plan_.last_touch[i]) buffers_->retire(c, mb);
}

template <class T> bool Trainer<T>::version_needed(int c, int version) const {
  // A micro-batch in flight reads it, or a forward to come may: the next forward reads the rule's version,
  // later ones no older (the rule never goes back).
  for (const auto& entry : in_flight_[c])
    if (entry.second == version) return true;
  if (next_forward_[c] >= std::int64_t(config_.train.steps) * local_microbatches_) return false;
  const int vstage = schedule_.virtual_stage(grid_.stage, c);
  return version >= schedule::rule_version(schedule_.updates, schedule_.ranks, schedule_.microbatches, vstage,
                                           int(next_forward_[c]), false);
}

template <class T> void Trainer<T>::bind_newest() const {
  for (const auto& versions : versions_) versions->bind(versions->newest());
}

template <class T> int Trainer<T>::older_versions(int c) const {
  // After the run's last step the pipeline is drained: nothing in flight, only the newest version.
  if (!asynchronous_ || step_ >= config_.train.steps) return 0;
  return schedule::versions_bound(schedule_.updates, schedule_.ranks, schedule_.virtual_stage(grid_.stage, c)) - 1;
}

template <class T> std::vector<T> Trainer<T>::older_version(int c, int older) const {
  const auto& versions = *versions_.at(c);
  const int version = std::max(0, versions.newest() - older);
  return versions.holds(version) ? versions.host_copy(version) : std::vector<T>();
}

template <class T> void Trainer<T>::resume_asynchronous(const std::vector<std::vector<std::vector<T>>>& older) {
  const auto& pc = config_.pipeline;
  resume_step_ = step_;
  base_microbatch_ = step_ * local_microbatches_;
  base_version_ = int(step_) * schedule::versions_per_step(schedule_.updates, local_microbatches_);
  const std::int64_t remaining = config_.train.steps - step_;
  if (remaining > 0) {
    // The lists of the rest of the run, beginning with the micro-batches in flight at the step boundary:
    // validated as every schedule is (their first reads are of the versions held at the start).
    const int steps = int(std::min<std::int64_t>(schedule::Horizon{pc.pipeline_size, local_microbatches_}.steps(),
                                                 remaining));
    replicated_ = schedule::asynchronous_replicas(schedule_.updates, pc.pipeline_size, local_microbatches_,
                                                  {steps, true}, grid_.data_parallel);
    schedule_ = replicated_.replicas.at(grid_.replica);
    actions_ = schedule_.actions[grid_.stage];
    plan_ = schedule::plan_buffers(schedule_, grid_.stage, actions_);
    step_ranges_ = schedule::step_ranges(actions_);
  }
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    // A drained run's checkpoint (no older versions): the newest stands for them all.
    std::vector<T> newest;
    if (older.at(c).empty()) {
      newest.resize(chunks_[c]->params().values().extent(0));
      Kokkos::deep_copy(Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(newest.data(), newest.size()),
                        chunks_[c]->params().values());
    }
    std::vector<std::pair<int, const T*>> held;
    for (int j = 1; j <= older_versions(int(c)); ++j)
      if (older[c].empty() || !older[c].at(j - 1).empty())
        held.push_back({base_version_ - j, older[c].empty() ? newest.data() : older[c][j - 1].data()});
    versions_[c]->restart(base_version_, held);
    in_flight_[c].clear();
    next_forward_[c] = base_microbatch_;
  }
}

template <class T> bool Trainer<T>::steady_step(std::int64_t step) const {
  if (!asynchronous_ || config_.train.steps < template_step_ + 2) return true;
  return step >= template_step_ && step + 1 < config_.train.steps;
}

template <class T> int Trainer<T>::peak_versions(int chunk) const {
  return asynchronous_ ? versions_.at(chunk)->peak() : 1;
}

// Asynchronous schedules: step t runs the step of the validated lists that step_source() names, shifted to
// step t (schedule/asynchronous.hpp). The lists keep micro-batches in flight across step boundaries: a
// step's last activation sends are received by the next stage in its next step. So the sends a step leaves
// undelivered are waited on when the next step begins (the buffer plan counts them back by the step's end
// S, and nothing runs in between), not at its end: between steps every rank may enter collectives (losses,
// stop signals, evaluation) that the receiving rank must reach before it posts the receive.
template <class T> StepStats Trainer<T>::async_step() {
  require(step_ < config_.train.steps, "train.steps = {}: an asynchronous run cannot go past its last step (it drains "
          "the pipeline there)", config_.train.steps);
  const auto wait = [&](std::size_t position) {
    return [this, position](comm::Transfer& transfer) {
      if (!transport_->wait(space_, transfer, config_.pipeline.recv_timeout_s))
        timeout(Action{Op::step, 0, 0, -1}, position);
    };
  };
  buffers_->reclaim(std::numeric_limits<std::size_t>::max(), wait(0));  // the previous step's last sends
  const double start = now();
  const auto source = schedule::step_source(int(step_ranges_.size()), template_step_,
                                            int(config_.train.steps - resume_step_), int(step_ - resume_step_));
  const auto [begin, end] = step_ranges_.at(source.step);
  StepState st;
  st.start = start;
  st.shift = source.shift;
  st.update_squares.assign(chunks_.size(), 0.0);
  timeline_.clear();
  stage_async_tokens(st, begin, end);
  clock_.start(space_);
  buffers_->begin_async_step();
  st.recv.assign(actions_.size(), comm::Transfer{});
  st.posted.assign(actions_.size(), false);
  st.loss_sums.assign(config_.train.microbatches, 0.0);  // by AsyncRules::loss_index
  Kokkos::deep_copy(space_, loss_sums_, 0.0);  // micro-batches whose loss is elsewhere count 0
  for (std::size_t i = begin; i < end; ++i) run_action(st, i);
  read_action_times(st);  // waits for the stream to finish the step's last compute action
  Kokkos::deep_copy(Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(st.loss_sums.data(),
                                                                                             st.loss_sums.size()),
                    loss_sums_);
  const double pipeline_end = now();

  StepStats stats;
  stats.pipeline_seconds = pipeline_end - start;
  stats.step = step_;
  stats.tokens = std::int64_t(config_.train.batch) * config_.model.seq_len;
  // The step's losses (on the last stages, each micro-batch's in its own place) and every stage's last
  // update's squared gradient norm (replica 0's: the replicas' updates are the same).
  std::vector<double> sums = st.loss_sums;
  double squares = 0;
  if (grid_.replica == 0)
    for (double s : st.update_squares) squares += s;
  sums.push_back(squares);
  comm::allreduce(sums, MPI_SUM, grid_.world, bound(config_, step_, "the loss and gradient-norm allreduce"));
  double loss = 0;
  for (int j = 0; j < config_.train.microbatches; ++j) loss += sums[j];
  stats.loss = loss / double(stats.tokens);
  stats.grad_norm = std::sqrt(sums.back());
  stats.lr = st.lr;
  // The run's last step drains the pipeline: every send is received within it.
  if (step_ + 1 == config_.train.steps) buffers_->reclaim(std::numeric_limits<std::size_t>::max(), wait(end - 1));
  stats.busy_seconds = st.busy;
  stats.seconds = now() - start;
  ++step_;
  return stats;
}

template <class T> StepStats Trainer<T>::step() {
  if (step_ == 0 && test_stall_seconds_ > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(test_stall_seconds_));
  if (asynchronous_) return async_step();
  const double start = now();
  const auto& list = actions_;
  StepState st;
  st.start = start;
  timeline_.clear();
  stage_tokens(step_);
  clock_.start(space_);
  buffers_->begin_step();
  st.recv.assign(list.size(), comm::Transfer{});
  st.posted.assign(list.size(), false);
  st.loss_sums.assign(config_.train.microbatches, 0.0);
  Kokkos::deep_copy(space_, loss_sums_, 0.0);  // micro-batches whose loss is elsewhere count 0
  for (std::size_t i = 0; i < list.size(); ++i) run_action(st, i);
  buffers_->reclaim(list.size(), [&](comm::Transfer& transfer) {
    if (!transport_->wait(space_, transfer, config_.pipeline.recv_timeout_s)) timeout(Action{}, list.size());
  });
  // Stream-ordered transfers: the host learns here, with a bound, that the stream got through them.
  if (transport_->stream_ordered() && !transport_->synchronize(space_, config_.pipeline.recv_timeout_s))
    timeout(Action{}, list.size());
  read_action_times(st);  // waits for the stream to finish the step's last compute action
  Kokkos::deep_copy(Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(st.loss_sums.data(),
                                                                                             st.loss_sums.size()),
                    loss_sums_);
  const double pipeline_end = now();
  std::vector<model::Chunk<T>*> chunks;
  for (auto& chunk : chunks_) chunks.push_back(chunk.get());
  reduction_->finish(space_, chunks, step_);

  StepStats stats;
  stats.pipeline_seconds = pipeline_end - start;
  stats.step = step_;
  stats.tokens = std::int64_t(config_.train.batch) * config_.model.seq_len;
  // Each micro-batch's loss lives on one rank, zeros elsewhere: the sum is exact, then added in order.
  comm::allreduce(st.loss_sums, MPI_SUM, grid_.world, bound(config_, step_, "the loss allreduce"));
  double loss = 0;
  for (double l : st.loss_sums) loss += l;
  stats.loss = loss / double(stats.tokens);
  const double optimizer_start = now();
  optimizer_step(stats);  // skips the update when the loss or the gradient is not finite
  space_.fence();
  stats.optimizer_seconds = now() - optimizer_start;
  stats.busy_seconds = st.busy;
  stats.seconds = now() - start;
  ++step_;
  return stats;
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

template <class T> void Trainer<T>::profile_layers(bool on) {
  if (on && layer_times_.empty())
    for (auto& chunk : chunks_)
      layer_times_.emplace_back(chunk->params().last_layer() - chunk->params().first_layer());
  for (std::size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->set_layer_times(on ? &layer_times_[c] : nullptr);
}

template <class T> std::vector<std::array<double, 4>> Trainer<T>::layer_seconds() const {
  std::vector<std::array<double, 4>> seconds(desc_.layers.size(), std::array<double, 4>{});
  for (std::size_t c = 0; c < layer_times_.size(); ++c) {
    const int first = chunks_[c]->params().first_layer();
    for (std::size_t i = 0; i < layer_times_[c].size(); ++i)
      for (int k = 0; k < 4; ++k)
        if (layer_times_[c][i].calls[k] > 0)
          seconds[first + i][k] = layer_times_[c][i].seconds[k] / double(layer_times_[c][i].calls[k]);
  }
  return seconds;
}

template <class T> double Trainer<T>::evaluate() {
  bind_newest();
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
  // Above the pipeline's tags: an asynchronous run may have sends of its last step still under way.
  const int eval_tag = schedule::message_tags(schedule_);
  // Only a rank with the first or the last chunk reads tokens (a middle stage never opens the data file).
  const bool reads_tokens = std::any_of(chunks_.begin(), chunks_.end(), [](const auto& c) { return c->first() || c->last(); });
  for (std::int64_t w = grid_.replica * mb; w < windows; w += std::int64_t(mb) * grid_.data_parallel) {
    if (reads_tokens)
      data::fill_validation_windows(corpus_->validation, w, mb, seq, &host_inputs_(0, 0), &host_targets_(0, 0));
    for (int v = 0; v < vstages; ++v) {
      if (schedule_.rank_of(v) != grid_.stage) continue;
      const int c = schedule_.chunk_of(v);
      auto& chunk = *chunks_[c];
      const int slot = slots[c];
      load_tokens(c, slot, 0);  // staging row 0 holds the window (refilled after the bounded fence below)
      if (v > 0) {
        const int prev = schedule_.rank_of(v - 1);
        if (prev == grid_.stage) {
          const int from = schedule_.chunk_of(v - 1);
          Kokkos::deep_copy(space_, chunk.input(slot), chunks_[from]->output(slots[from]));
        } else {
          comm::Transfer r = transport_->recv(space_, chunk.input(slot).data(), chunk.input(slot).span() * sizeof(T),
                                              prev, eval_tag + v);
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
                                            schedule_.rank_of(v + 1), eval_tag + v + 1);
        if (!transport_->wait(space_, r, config_.pipeline.recv_timeout_s))
          timeout(Action{Op::send_activation, 0, c, -1}, 0);
      }
    }
  }
  for (std::size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->release(slots[c]);
  loss_sum = comm::allreduce(loss_sum, MPI_SUM, grid_.world, bound(config_, step_, "the validation-loss allreduce"));
  return loss_sum / double(windows * seq);
}

template <class T> std::uint64_t Trainer<T>::param_checksum() const {
  bind_newest();
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
