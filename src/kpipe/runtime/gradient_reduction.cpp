#include "kpipe/runtime/gradient_reduction.hpp"

#include <fmt/format.h>

namespace kpipe::runtime {

template <class T>
GradientReduction<T>::GradientReduction(const comm::ProcessGrid& grid, const schedule::Replicated& schedule,
                                        const std::string& transport, double timeout_s,
                                        std::function<void(const schedule::Action&)> on_timeout)
    : grid_(&grid), ordered_(schedule.ordered), chunks_(schedule.replicas.front().chunks), timeout_s_(timeout_s), on_timeout_(std::move(on_timeout)),
      transport_(comm::make_transport(transport, grid.replicas, timeout_s)) {
  if (ordered_) holder_of_last_ = schedule.holder(schedule.groups() - 1);
}

template <class T>
void GradientReduction<T>::wait(const ExecSpace& space, comm::Transfer& transfer, const schedule::Action& action) {
  if (!transport_->wait(space, transfer, timeout_s_)) on_timeout_(action);
}

template <class T>
void GradientReduction<T>::receive(const ExecSpace& space, model::Chunk<T>& chunk, const schedule::Action& a) {
  if (sent_.size() <= std::size_t(a.chunk)) {
    sent_.resize(a.chunk + 1);
    sent_action_.resize(a.chunk + 1);
  }
  if (sent_[a.chunk].active()) wait(space, sent_[a.chunk], sent_action_[a.chunk]);
  const auto& g = chunk.params().grads();
  comm::Transfer received = transport_->recv(space, g.data(), g.span() * sizeof(T), a.peer, tag(a));
  wait(space, received, a);
}

template <class T>
void GradientReduction<T>::send(const ExecSpace& space, model::Chunk<T>& chunk, const schedule::Action& a) {
  if (sent_.size() <= std::size_t(a.chunk)) {
    sent_.resize(a.chunk + 1);
    sent_action_.resize(a.chunk + 1);
  }
  const auto& g = chunk.params().grads();
  sent_action_[a.chunk] = a;
  sent_[a.chunk] = transport_->send(space, g.data(), g.span() * sizeof(T), a.peer, tag(a));
}

template <class T>
void GradientReduction<T>::finish(const ExecSpace& space, const std::vector<model::Chunk<T>*>& chunks, std::int64_t step) {
  if (grid_->data_parallel == 1) return;
  const schedule::Action none{};
  for (std::size_t c = 0; c < sent_.size(); ++c)
    if (sent_[c].active()) wait(space, sent_[c], sent_action_[c]);
  for (auto* chunk : chunks) {
    const auto& g = chunk->params().grads();
    // MPI: a bounded collective (comm/bounded.hpp) that names a replica that never joins; NCCL: on the stream,
    // its communicator aborted after timeout_s.
    comm::Transfer total =
        ordered_ ? transport_->broadcast(space, g.data(), g.span(), comm::scalar_of<T>(), holder_of_last_,
                                         fmt::format("the broadcast of the replicas' gradient sum of step {}", step))
                 : transport_->all_reduce_sum(space, g.data(), g.span(), comm::scalar_of<T>(),
                                              fmt::format("the allreduce of the replicas' gradients of step {}", step));
    wait(space, total, none);
  }
  // Stream-ordered (NCCL): the host learns here, with a bound, that the stream got through the collectives.
  if (transport_->stream_ordered() && !transport_->synchronize(space, timeout_s_)) on_timeout_(none);
}

template class GradientReduction<float>;
template class GradientReduction<double>;

}  // namespace kpipe::runtime
