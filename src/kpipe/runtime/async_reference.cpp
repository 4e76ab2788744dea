#include "kpipe/runtime/async_reference.hpp"

#include <cmath>
#include <limits>

#include "kpipe/core/error.hpp"
#include "kpipe/core/fence.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/data/sampler.hpp"
#include "kpipe/partition/configured.hpp"
#include "kpipe/runtime/gradient_reduction.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/plan.hpp"

namespace kpipe::runtime {

template <class T, class A>
AsyncReference<T, A>::AsyncReference(const Config& config, const data::Corpus& corpus)
    : config_(config), corpus_(&corpus), desc_(model::describe(config.model)), rules_(AsyncRules::of(config)) {
  // The layout validated as a run plans it (the partition reads only what each stage keeps in flight, which
  // no delivery changes).
  const auto replicated = schedule::plan(config, schedule::Delivery::buffered).run;
  const auto ranges = partition::configured_partition(config, desc_, replicated);
  const int p = config.pipeline.pipeline_size;
  const nn::Recompute recompute = config.memory.recompute;
  for (int s = 0; s < p; ++s) {
    chunks_.push_back(std::make_unique<model::Chunk<T, A>>(desc_, ranges[s].first, ranges[s].last,
                                                        rules_.sequences_per_microbatch, recompute));
    chunks_.back()->params().initialize(space_, config.train.seed);
    slots_.push_back(chunks_.back()->acquire());
  }
  versions_.resize(p);
  newest_.assign(p, 0);
  live_.assign(p, 0);
  peak_versions_.assign(p, 1);
  last_squares_.assign(p, 0.0);
  if (rules_.replicas > 1) {
    replica_grads_.resize(p);
    for (int s = 0; s < p; ++s)
      for (int r = 0; r < rules_.replicas; ++r)
        replica_grads_[s].emplace_back("kpipe::runtime::AsyncReference::replica_grads",
                                       chunks_[s]->params().grads().extent(0));
  }
  for (int s = 0; s < p; ++s) {
    const auto& values = chunks_[s]->params().values();
    View1<T> copy(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kpipe::runtime::AsyncReference::version"),
                  values.extent(0));
    Kokkos::deep_copy(space_, copy, values);
    versions_[s][0] = copy;
  }
}

template <class T, class A> AsyncReference<T, A>::~AsyncReference() = default;

template <class T, class A> void AsyncReference<T, A>::bind(int s, int version) {
  if (live_[s] == version) return;
  const auto it = versions_[s].find(version);
  if (it == versions_[s].end()) throw std::logic_error("AsyncReference: a version that is not held");
  Kokkos::deep_copy(space_, chunks_[s]->params().values(), it->second);
  chunks_[s]->params().refresh_compute_copy(space_);  // what the products read (mixed precision)
  live_[s] = version;
}

template <class T, class A> void AsyncReference<T, A>::forget_unneeded(int s, std::int64_t next) {
  // Micro-batches from `next` on read the rule's version or later; the newest is the weights.
  const int p = stages();
  int oldest = newest_[s];
  for (std::int64_t k = next; k < next + p + rules_.microbatches; ++k)
    oldest = std::min(oldest, schedule::rule_version(rules_.updates, p, rules_.microbatches, s, int(k), false));
  for (auto it = versions_[s].begin(); it != versions_[s].end();)
    it = it->first < oldest ? versions_[s].erase(it) : std::next(it);
}

template <class T, class A> void AsyncReference<T, A>::run_microbatch(std::int64_t k, int replica, const std::vector<int>& read,
                                                         double& loss_sum) {
  const int p = stages(), seq = rules_.seq_len, mb = rules_.sequences_per_microbatch;
  const auto rows = std::int64_t(mb) * seq;
  std::vector<Token> inputs(rows), targets(rows);
  data::fill_train_windows(corpus_->train, config_.train.seed, rules_.sampler_step(k), rules_.first_sequence(k, replica),
                           mb, seq, inputs.data(), targets.data());
  using HostTokens = Kokkos::View<const Token*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  // Forward down the stages, each on its version.
  for (int s = 0; s < p; ++s) {
    auto& chunk = *chunks_[s];
    const int slot = slots_[s];
    bind(s, read[s]);
    if (chunk.first()) Kokkos::deep_copy(space_, chunk.tokens(slot), HostTokens(inputs.data(), rows));
    if (chunk.last()) Kokkos::deep_copy(space_, chunk.targets(slot), HostTokens(targets.data(), rows));
    if (s > 0) Kokkos::deep_copy(space_, chunk.input(slot), chunks_[s - 1]->output(slots_[s - 1]));
    chunk.forward(space_, slot);
    if (chunk.last()) loss_sum = chunk.loss_sum(space_, slot);
  }
  // Backward up the stages on the same versions (weight stashing); each stage's gradient accumulates, per
  // replica where there are several.
  const T loss_scale = T(rules_.loss_scale());
  for (int s = p - 1; s >= 0; --s) {
    auto& chunk = *chunks_[s];
    bind(s, read[s]);
    if (rules_.replicas > 1) Kokkos::deep_copy(space_, chunk.params().grads(), replica_grads_[s][replica]);
    if (s < p - 1) Kokkos::deep_copy(space_, chunk.output_grad(slots_[s]), chunks_[s + 1]->input_grad(slots_[s + 1]));
    chunk.backward_input(space_, slots_[s], loss_scale);
    chunk.backward_weight(space_, slots_[s]);
    if (rules_.replicas > 1) Kokkos::deep_copy(space_, replica_grads_[s][replica], chunk.params().grads());
  }
}

template <class T, class A> typename AsyncReference<T, A>::StepResult AsyncReference<T, A>::step() {
  const int p = stages(), m = rules_.microbatches, d = rules_.replicas;
  const auto rows = std::int64_t(rules_.sequences_per_microbatch) * rules_.seq_len;
  StepResult result;
  result.microbatch_losses.assign(std::size_t(m) * d, 0.0);
  for (int j = 0; j < m; ++j, ++microbatch_) {
    const std::int64_t k = microbatch_;
    std::vector<int> read(p);
    for (int s = 0; s < p; ++s) read[s] = schedule::rule_version(rules_.updates, p, m, s, int(k), false);
    versions_read_.push_back(read);
    for (int r = 0; r < d; ++r) {
      double loss_sum = 0;
      run_microbatch(k, r, read, loss_sum);
      result.microbatch_losses[rules_.loss_index(k, r)] = loss_sum;
    }
    // The updates this micro-batch ends: each from the newest version, producing the next.
    const bool window_end = (k + 1) % m == 0;
    if (!rules_.per_microbatch() && !window_end) continue;
    const std::int64_t update = rules_.update_of(k);
    for (int s = 0; s < p; ++s) {
      auto& params = chunks_[s]->params();
      bind(s, newest_[s]);
      if (d > 1) {  // the replicas' sum, in replica order (GradientReduction::before_update)
        Kokkos::deep_copy(space_, params.grads(), replica_grads_[s][0]);
        for (int r = 1; r < d; ++r) add_gradients<T>(space_, replica_grads_[s][r], params.grads());
        for (auto& grads : replica_grads_[s]) Kokkos::deep_copy(space_, grads, T(0));
      }
      last_squares_[s] = apply_async_update(space_, config_.optim, rules_, s, update, params, params.values());
      // The newest version becomes a stashed one when a micro-batch still to come reads it.
      const int produced = newest_[s] + 1;
      View1<T> copy(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kpipe::runtime::AsyncReference::version"),
                    params.values().extent(0));
      Kokkos::deep_copy(space_, copy, params.values());
      versions_[s][produced] = copy;
      newest_[s] = live_[s] = produced;
      forget_unneeded(s, k + 1);
      peak_versions_[s] = std::max(peak_versions_[s], int(versions_[s].size()));
    }
  }
  named_fence(space_, "kpipe::runtime::AsyncReference::step: the host reads the losses");
  double loss_sum = 0;
  for (double l : result.microbatch_losses) loss_sum += l;  // in the trainer's order (AsyncRules::loss_index)
  result.loss = loss_sum / double(std::int64_t(m) * d * rows);
  for (double& l : result.microbatch_losses) l /= double(rows);
  double squares = 0;
  for (double s : last_squares_) squares += s;
  result.grad_norm = std::sqrt(squares);
  ++step_;
  return result;
}

template <class T, class A> std::uint64_t AsyncReference<T, A>::param_checksum() const {
  std::vector<std::uint64_t> hashes;
  for (std::size_t s = 0; s < chunks_.size(); ++s) {
    const auto& values = versions_[s].at(newest_[s]);
    // Hash the newest version (the live buffer may hold an older one between micro-batches).
    auto& params = const_cast<model::Chunk<T, A>&>(*chunks_[s]).params();
    if (live_[s] != newest_[s]) Kokkos::deep_copy(params.values(), values);
    const auto own = model::tensor_hashes(params);
    if (live_[s] != newest_[s]) Kokkos::deep_copy(params.values(), versions_[s].at(live_[s]));
    hashes.insert(hashes.end(), own.begin(), own.end());
  }
  return model::combine_hashes(hashes);
}

#define KPIPE_INSTANTIATE(T, A) template class AsyncReference<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
