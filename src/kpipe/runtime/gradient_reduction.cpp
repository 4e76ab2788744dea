#include "kpipe/runtime/gradient_reduction.hpp"

#include <fmt/format.h>

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/core/step_number.hpp"

namespace kpipe::runtime {

template <class T>
GradientReduction<T>::GradientReduction(const comm::ProcessGrid& grid, const schedule::Replicated& schedule,
                                        comm::TransportKind transport, double timeout_s,
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
void GradientReduction<T>::receive(const ExecSpace& space, const View1<T>& g, const schedule::Action& a) {
  if (sent_.size() <= std::size_t(a.chunk)) {
    sent_.resize(a.chunk + 1);
    sent_action_.resize(a.chunk + 1);
  }
  if (sent_[a.chunk].active()) wait(space, sent_[a.chunk], sent_action_[a.chunk]);
  comm::Transfer received = transport_->recv(space, g.data(), g.span() * sizeof(T), a.peer, tag(a));
  wait(space, received, a);
}

template <class T>
void GradientReduction<T>::send(const ExecSpace& space, const View1<T>& g, const schedule::Action& a) {
  if (sent_.size() <= std::size_t(a.chunk)) {
    sent_.resize(a.chunk + 1);
    sent_action_.resize(a.chunk + 1);
  }
  sent_action_[a.chunk] = a;
  sent_[a.chunk] = transport_->send(space, g.data(), g.span() * sizeof(T), a.peer, tag(a));
}

template <class T>
void GradientReduction<T>::finish(const ExecSpace& space, const std::vector<View1<T>>& grads, std::int64_t step) {
  if (grid_->data_parallel == 1) return;
  const schedule::Action none{};
  for (std::size_t c = 0; c < sent_.size(); ++c)
    if (sent_[c].active()) wait(space, sent_[c], sent_action_[c]);
  for (const auto& g : grads) {
    // MPI: a bounded collective (comm/bounded.hpp) that names a replica that never joins; NCCL: on the stream,
    // its communicator aborted after timeout_s.
    const std::int64_t n = step_number(step);
    comm::Transfer total =
        ordered_ ? transport_->broadcast(space, g.data(), g.span(), comm::scalar_of<T>(), holder_of_last_,
                                         fmt::format("the broadcast of the replicas' gradient sum of step {}", n))
                 : transport_->all_reduce_sum(space, g.data(), g.span(), comm::scalar_of<T>(),
                                              fmt::format("the allreduce of the replicas' gradients of step {}", n));
    wait(space, total, none);
  }
  // Stream-ordered (NCCL): the host learns here, with a bound, that the stream got through the collectives.
  if (transport_->stream_ordered() && !transport_->synchronize(space, timeout_s_)) on_timeout_(none);
}

template <class T>
void GradientReduction<T>::reserve_update_sums(const ExecSpace& space, const std::vector<std::int64_t>& elements,
                                               bool ordered, bool hold) {
  ordered_updates_ = ordered;
  if (!hold) return;
  memory::Scope scope(memory::Category::gradients);
  for (const std::int64_t n : elements)
    update_sums_.emplace_back(Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                                                 "kpipe::runtime::GradientReduction::update_sum"), n);
}

template <class T>
void GradientReduction<T>::before_update(const ExecSpace& space, const View1<T>& g, const schedule::Action& u,
                                         std::int64_t update) {
  const int replicas = grid_->data_parallel, replica = grid_->replica;
  if (replicas == 1) return;
  const std::string what = fmt::format("the replicas' gradient sum of update {}", update);
  if (!ordered_updates_) {
    comm::Transfer total = transport_->all_reduce_sum(space, g.data(), g.span(), comm::scalar_of<T>(), what);
    wait(space, total, u);
    return;
  }
  // One message per update and chunk between two replicas, in list order: MPI keeps them apart by the chunk.
  const int tag = u.chunk;
  if (replica > 0) {
    const View1<T>& sum = update_sums_.at(u.chunk);
    comm::Transfer received = transport_->recv(space, sum.data(), sum.span() * sizeof(T), replica - 1, tag);
    wait(space, received, schedule::Action{u.op, u.microbatch, u.chunk, replica - 1});
    add_gradients<T>(space, sum, g);
  }
  if (replica + 1 < replicas) {
    comm::Transfer sent = transport_->send(space, g.data(), g.span() * sizeof(T), replica + 1, tag);
    wait(space, sent, schedule::Action{u.op, u.microbatch, u.chunk, replica + 1});  // before the broadcast lands in g
  }
  comm::Transfer total = transport_->broadcast(space, g.data(), g.span(), comm::scalar_of<T>(), replicas - 1,
                                               "the broadcast of " + what);
  wait(space, total, u);
}

template <class T> void add_gradients(const ExecSpace& space, const View1<const T>& from, const View1<T>& into) {
  const T* KOKKOS_RESTRICT f = from.data();
  T* KOKKOS_RESTRICT t = into.data();
  for_each_block("kpipe::runtime::add_gradients", space, std::int64_t(into.extent(0)),
                 KOKKOS_LAMBDA(std::int64_t begin, std::int64_t end) {
                   for (std::int64_t i = begin; i < end; ++i) t[i] = f[i] + t[i];
                 });
}

#define KPIPE_INSTANTIATE(T)                                                                                          \
  template class GradientReduction<T>;                                                                                \
  template void add_gradients(const ExecSpace&, const View1<const T>&, const View1<T>&);
KPIPE_TRAINING_ACCUMULATIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
