#include "kpipe/runtime/stage_model.hpp"

#include <algorithm>
#include <type_traits>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::runtime {

namespace {

blas::Math math_of(Precision precision) { return precision == Precision::tf32 ? blas::Math::tf32 : blas::Math::exact; }

}  // namespace

template <class T, class A>
StageModel<T, A>::StageModel(const Config& config, const model::ModelDesc& desc, const comm::ProcessGrid& grid,
                          const RunPlan& plan)
    : config_(config), desc_(&desc), grid_(grid), updates_(plan.lists().updates), ranks_(plan.lists().ranks) {
  // TF32 products are a CUDA library's; a host build cannot honour them (bf16 runs everywhere).
  require(config.train.precision != Precision::tf32 || !Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible,
          "train.precision = \"tf32\": TF32 tensor-core products need a CUDA build of kpipe (this one runs on {}); use "
          "fp32 or bf16", ExecSpace::name());
  // The storage the configuration asks for is the one this stage model was instantiated for.
  require(std::is_same_v<A, bf16> == (config.train.precision == Precision::bf16),
          "train.precision = \"{}\": this program was built for {} storage", config.train.precision, type_name<A>());
  const auto& lists = plan.lists();
  for (int c = 0; c < lists.chunks; ++c) {
    vstages_.push_back(lists.virtual_stage(grid.stage, c));
    const auto& r = plan.ranges.at(vstages_.back());
    chunks_.push_back(std::make_unique<model::Chunk<T, A>>(desc, r.first, r.last, plan.sequences_per_microbatch,
                                                           config.memory.recompute, math_of(config.train.precision)));
    chunks_.back()->params().initialize(space_, config.train.seed);
  }
}

template <class T, class A> StageModel<T, A>::~StageModel() = default;

template <class T, class A> std::vector<model::Chunk<T, A>*> StageModel<T, A>::chunk_pointers() {
  std::vector<model::Chunk<T, A>*> pointers;
  for (auto& chunk : chunks_) pointers.push_back(chunk.get());
  return pointers;
}

template <class T, class A> void StageModel<T, A>::bind_newest() {
  for (auto& versions : versions_) versions->bind(versions->newest());
}

template <class T, class A> int StageModel<T, A>::older_versions(int c, std::int64_t next_step) const {
  // After the run's last step the pipeline is drained: nothing in flight, only the newest version.
  return next_step >= config_.train.steps ? 0 : most_older_versions(c);
}

template <class T, class A> int StageModel<T, A>::most_older_versions(int c) const {
  return versioned() ? schedule::versions_bound(updates_, ranks_, vstages_.at(c)) - 1 : 0;
}

template <class T, class A> View1<T> StageModel<T, A>::older_version(int c, int older) const {
  const auto& versions = *versions_.at(c);
  const int version = std::max(0, versions.newest() - older);
  return versions.holds(version) ? versions.values(version) : View1<T>();
}

template <class T, class A> void StageModel<T, A>::profile_layers(bool on) {
  if (on && layer_times_.empty())
    for (auto& chunk : chunks_) layer_times_.emplace_back(chunk->params().last_layer() - chunk->params().first_layer());
  for (std::size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->set_layer_times(on ? &layer_times_[c] : nullptr);
}

template <class T, class A> std::vector<std::array<double, 4>> StageModel<T, A>::layer_seconds() const {
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

template <class T, class A> std::uint64_t StageModel<T, A>::param_checksum() {
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

#define KPIPE_INSTANTIATE(T, A) template class StageModel<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
