#include "kpipe/runtime/stage_model.hpp"

#include <algorithm>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::runtime {

template <class T>
StageModel<T>::StageModel(const Config& config, const model::ModelDesc& desc, const comm::ProcessGrid& grid,
                          const RunPlan& plan)
    : config_(config), desc_(&desc), grid_(grid), updates_(plan.lists().updates), ranks_(plan.lists().ranks) {
  const auto& lists = plan.lists();
  for (int c = 0; c < lists.chunks; ++c) {
    vstages_.push_back(lists.virtual_stage(grid.stage, c));
    const auto& r = plan.ranges.at(vstages_.back());
    chunks_.push_back(std::make_unique<model::Chunk<T>>(desc, r.first, r.last, plan.sequences_per_microbatch,
                                                        config.memory.recompute));
    chunks_.back()->params().initialize(space_, config.train.seed);
    if (lists.asynchronous()) versions_.push_back(std::make_unique<WeightVersions<T>>(space_, chunks_.back()->params()));
  }
  transport_ = comm::make_transport(plan.transport, grid.pipeline, config.pipeline.recv_timeout_s);
}

template <class T> StageModel<T>::~StageModel() = default;

template <class T> std::vector<model::Chunk<T>*> StageModel<T>::chunk_pointers() {
  std::vector<model::Chunk<T>*> pointers;
  for (auto& chunk : chunks_) pointers.push_back(chunk.get());
  return pointers;
}

template <class T> void StageModel<T>::bind_newest() {
  for (auto& versions : versions_) versions->bind(versions->newest());
}

template <class T> int StageModel<T>::older_versions(int c, std::int64_t next_step) const {
  // After the run's last step the pipeline is drained: nothing in flight, only the newest version.
  if (!versioned() || next_step >= config_.train.steps) return 0;
  return schedule::versions_bound(updates_, ranks_, vstages_.at(c)) - 1;
}

template <class T> std::vector<T> StageModel<T>::older_version(int c, int older) const {
  const auto& versions = *versions_.at(c);
  const int version = std::max(0, versions.newest() - older);
  return versions.holds(version) ? versions.host_copy(version) : std::vector<T>();
}

template <class T> void StageModel<T>::profile_layers(bool on) {
  if (on && layer_times_.empty())
    for (auto& chunk : chunks_) layer_times_.emplace_back(chunk->params().last_layer() - chunk->params().first_layer());
  for (std::size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->set_layer_times(on ? &layer_times_[c] : nullptr);
}

template <class T> std::vector<std::array<double, 4>> StageModel<T>::layer_seconds() const {
  std::vector<std::array<double, 4>> seconds(desc_->layers.size(), std::array<double, 4>{});
  for (std::size_t c = 0; c < layer_times_.size(); ++c) {
    const int first = chunks_[c]->params().first_layer();
    for (std::size_t i = 0; i < layer_times_[c].size(); ++i)
      for (int k = 0; k < 4; ++k)
        if (layer_times_[c][i].calls[k] > 0)
          seconds[first + i][k] = layer_times_[c][i].seconds[k] / double(layer_times_[c][i].calls[k]);
  }
  return seconds;
}

template <class T> std::uint64_t StageModel<T>::param_checksum() {
  bind_newest();
  // Each tensor's hash sits at its global position, zeros elsewhere; a sum over ranks assembles the list.
  std::vector<std::int64_t> first_tensor(desc_->layers.size() + 1, 0);
  for (std::size_t l = 0; l < desc_->layers.size(); ++l)
    first_tensor[l + 1] = first_tensor[l] + std::int64_t(desc_->layers[l].params.size());
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
  comm::allreduce(hashes, MPI_SUM, grid_.pipeline, {config_.pipeline.recv_timeout_s, "the param_checksum allreduce"});
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

template class StageModel<float>;
template class StageModel<double>;
template std::vector<double> layer_grad_squares(const ExecSpace&, const model::ParameterStore<float>&);
template std::vector<double> layer_grad_squares(const ExecSpace&, const model::ParameterStore<double>&);

}  // namespace kpipe::runtime
