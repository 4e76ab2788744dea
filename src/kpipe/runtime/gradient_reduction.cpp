#include "kpipe/runtime/gradient_reduction.hpp"

#include <fmt/format.h>

#include <type_traits>

#include "kpipe/comm/bounded.hpp"

namespace kpipe::runtime {

template <class T>
GradientReduction<T>::GradientReduction(const comm::ProcessGrid& grid, const schedule::Replicated& schedule,
                                        double timeout_s, std::function<void(const schedule::Action&)> on_timeout)
    : grid_(&grid), ordered_(schedule.ordered), timeout_s_(timeout_s), on_timeout_(std::move(on_timeout)),
      transport_(comm::make_transport(grid.replicas)) {
  if (ordered_) holder_of_last_ = schedule.holder(schedule.groups() - 1);
}

template <class T> void GradientReduction<T>::wait(comm::Request& request, const schedule::Action& action) {
  if (!transport_->wait(request, timeout_s_)) on_timeout_(action);
}

template <class T> void GradientReduction<T>::receive(model::Chunk<T>& chunk, const schedule::Action& a) {
  if (sent_.size() <= std::size_t(a.chunk)) {
    sent_.resize(a.chunk + 1);
    sent_action_.resize(a.chunk + 1);
  }
  if (sent_[a.chunk].active()) wait(sent_[a.chunk], sent_action_[a.chunk]);
  const auto& g = chunk.params().grads();
  comm::Request request;
  transport_->recv(g.data(), g.span() * sizeof(T), a.peer, a.microbatch, request);
  wait(request, a);
}

template <class T> void GradientReduction<T>::send(model::Chunk<T>& chunk, const schedule::Action& a) {
  if (sent_.size() <= std::size_t(a.chunk)) {
    sent_.resize(a.chunk + 1);
    sent_action_.resize(a.chunk + 1);
  }
  const auto& g = chunk.params().grads();
  sent_action_[a.chunk] = a;
  transport_->send(g.data(), g.span() * sizeof(T), a.peer, a.microbatch, sent_[a.chunk]);
}

template <class T> void GradientReduction<T>::finish(const std::vector<model::Chunk<T>*>& chunks, std::int64_t step) {
  if (grid_->data_parallel == 1) return;
  for (std::size_t c = 0; c < sent_.size(); ++c)
    if (sent_[c].active()) wait(sent_[c], sent_action_[c]);
  const auto type = comm::mpi_type<T>();
  for (auto* chunk : chunks) {
    const auto& g = chunk->params().grads();
    const int count = int(g.span());
    // Collectives read the buffer where MPI can (host, CUDA-aware MPI), else a host copy of it.
    auto collective = [&](T* data) {
      if (ordered_)
        comm::bcast(data, count, type, holder_of_last_, grid_->replicas,
                    {timeout_s_, fmt::format("the broadcast of the replicas' gradient sum of step {}", step)});
      else
        comm::allreduce(data, count, type, MPI_SUM, grid_->replicas,
                        {timeout_s_, fmt::format("the allreduce of the replicas' gradients of step {}", step)});
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

template class GradientReduction<float>;
template class GradientReduction<double>;

}  // namespace kpipe::runtime
