#include "kpipe/runtime/trainer.hpp"

#include <chrono>
#include <cmath>

#include "kpipe/data/sampler.hpp"
#include "kpipe/nn/optimizer.hpp"

namespace kpipe::runtime {

template <class T>
Trainer<T>::Trainer(const Config& config, const data::Corpus& corpus)
    : config_(config), corpus_(&corpus), desc_(model::describe(config.model)),
      sequences_per_microbatch_(config.train.batch / config.train.microbatches) {
  const int layers = int(desc_.layers.size());
  chunk_ = std::make_unique<model::Chunk<T>>(desc_, 0, layers, sequences_per_microbatch_);
  chunk_->params().initialize(space_, config.train.seed);
  const auto rows = chunk_->rows();
  host_inputs_ = Kokkos::View<Token*, HostSpace>(uninitialized("kpipe::runtime::Trainer::host_inputs"), rows);
  host_targets_ = Kokkos::View<Token*, HostSpace>(uninitialized("kpipe::runtime::Trainer::host_targets"), rows);
}

template <class T> void Trainer<T>::load_microbatch(int slot, std::int64_t step, int microbatch) {
  data::fill_train_windows(corpus_->train, config_.train.seed, step, microbatch * sequences_per_microbatch_,
                           sequences_per_microbatch_, config_.model.seq_len, host_inputs_.data(),
                           host_targets_.data());
  Kokkos::deep_copy(space_, chunk_->tokens(slot), host_inputs_);
  Kokkos::deep_copy(space_, chunk_->targets(slot), host_targets_);
  space_.fence();  // the host buffers are refilled for the next micro-batch
}

template <class T> StepStats Trainer<T>::step() {
  const auto start = std::chrono::steady_clock::now();
  auto& chunk = *chunk_;
  const std::int64_t tokens = std::int64_t(config_.train.batch) * config_.model.seq_len;
  const T loss_scale = T(1.0 / double(tokens));
  double loss_sum = 0;
  for (int j = 0; j < config_.train.microbatches; ++j) {
    const int slot = chunk.acquire();
    load_microbatch(slot, step_, j);
    chunk.forward(space_, slot);
    loss_sum += chunk.loss_sum(space_, slot);
    chunk.backward_input(space_, slot, loss_scale);
    chunk.backward_weight(space_, slot);
    chunk.release(slot);
  }
  StepStats stats;
  stats.step = step_;
  stats.loss = loss_sum / double(tokens);
  stats.grad_norm = global_grad_norm();
  stats.lr = nn::learning_rate(config_.optim, step_, config_.train.steps);
  optimizer_step(stats.lr, nn::clip_factor(stats.grad_norm, config_.optim.grad_clip));
  space_.fence();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.tokens = tokens;
  ++step_;
  return stats;
}

template <class T> double Trainer<T>::global_grad_norm() {
  double total = 0;
  for (double s : layer_grad_squares(space_, chunk_->params())) total += s;
  return std::sqrt(total);
}

template <class T> void Trainer<T>::optimizer_step(double lr, double grad_scale) {
  auto& p = chunk_->params();
  if (config_.optim.kind == "sgd")
    nn::sgd_update(space_, config_.optim, lr, grad_scale, p.values(), p.grads(), p.moment1(), p.decay_mask());
  else
    nn::adamw_update(space_, config_.optim, lr, step_ + 1, grad_scale, p.values(), p.grads(), p.moment1(),
                     p.moment2(), p.decay_mask());
  p.zero_grads(space_);
}

template <class T> double Trainer<T>::evaluate() {
  auto& chunk = *chunk_;
  const int seq = config_.model.seq_len, mb = sequences_per_microbatch_;
  const std::int64_t available = data::validation_windows(std::int64_t(corpus_->validation.size()), seq);
  std::int64_t windows = std::min<std::int64_t>(available, std::int64_t(config_.train.eval_batches) * config_.train.batch);
  windows -= windows % mb;
  if (windows == 0) return std::nan("");
  double loss_sum = 0;
  const int slot = chunk.acquire();
  for (std::int64_t w = 0; w < windows; w += mb) {
    data::fill_validation_windows(corpus_->validation, w, mb, seq, host_inputs_.data(), host_targets_.data());
    Kokkos::deep_copy(space_, chunk.tokens(slot), host_inputs_);
    Kokkos::deep_copy(space_, chunk.targets(slot), host_targets_);
    chunk.forward(space_, slot);
    loss_sum += chunk.loss_sum(space_, slot);
  }
  chunk.release(slot);
  return loss_sum / double(windows * seq);
}

template <class T> std::uint64_t Trainer<T>::param_checksum() const {
  return model::combine_hashes(model::tensor_hashes(chunk_->params()));
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
