#pragma once
// Combining the replicas' weight gradients, as the schedule's reduction says (schedule/reduction.hpp):
// "ordered" runs the running sum's actions where the lists have them (receive the sum into a chunk's
// gradient buffer, send it on from there) and ends with the last group's holder broadcasting the final
// sum; "allreduce" sums the replicas' buffers after the lists. Either way every replica ends the step with
// the same gradients. Everything goes through the replicas' transport (MPI, staged MPI or NCCL), posted on
// the execution space after the kernels that produce the gradients: no fence here.
//
// Asynchronous schedules have no step end to reduce at: every update action U sums the replicas' gradients
// first (before_update). "ordered" makes that sum exact and layout-free: replica r receives the sum of replicas
// 0 .. r-1, adds its own (add_gradients) and passes it on, and the last replica broadcasts the total, so the
// update applies ((g0 + g1) + g2) + ..., which the reference (async_reference.hpp) adds in the same order.
// "allreduce" leaves the order to the transport's all-reduce (equal to the reference up to rounding; exact
// for two replicas, since a + b = b + a).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/transport.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/schedule/reduction.hpp"

namespace kpipe::runtime {

template <class T> class GradientReduction {
 public:
  // `transport`: the kind the sums travel by (comm::make_transport; the pipeline's, or "mpi" where the plan's
  // sum route is SumRoute::ordered_by_mpi: running sums on the stream would close a cycle, schedule/plan.hpp). `on_timeout` is called (and must not
  // return) when a sum does not arrive within timeout_s.
  GradientReduction(const comm::ProcessGrid& grid, const schedule::Replicated& schedule, comm::TransportKind transport,
                    double timeout_s, std::function<void(const schedule::Action&)> on_timeout);

  // Asynchronous schedules with several replicas: whether each update sums them in replica order (else by
  // all-reduce), and where this replica holds the buffer each chunk's partial sums arrive in
  // (schedule::holds_update_sum: the memory plan counts it as gradients), `elements` per chunk. Before any update.
  void reserve_update_sums(const ExecSpace& space, const std::vector<std::int64_t>& elements, bool ordered, bool hold);
  // Before update action `u` (the run's update number `update`): the chunk's gradient buffer `grads` becomes the
  // sum over the replicas, the same on every replica. Host-blocking, bounded by timeout_s.
  void before_update(const ExecSpace& space, const View1<T>& grads, const schedule::Action& u, std::int64_t update);

  // recv_sum: the sum this chunk sent before has left (its buffer is the one we receive into); then the sum
  // for the action's group arrives into the chunk's gradient buffer (for work queued on `space` from now on).
  void receive(const ExecSpace& space, const View1<T>& grads, const schedule::Action& action);
  // send_sum: the chunk's gradient buffer, as the work queued on `space` leaves it, goes to the next group's
  // holder.
  void send(const ExecSpace& space, const View1<T>& grads, const schedule::Action& action);
  // After the step's lists: every chunk's gradients (grads[c]) are the whole mini-batch's, on every replica. The
  // broadcast or all-reduce is bounded by timeout_s; `step` names it if it does not complete.
  void finish(const ExecSpace& space, const std::vector<View1<T>>& grads, std::int64_t step);

 private:
  void wait(const ExecSpace& space, comm::Transfer& transfer, const schedule::Action& action);
  // MPI tells two chunks' sums for one group apart by the tag (NCCL, untagged, by the proven order).
  int tag(const schedule::Action& a) const { return a.microbatch * chunks_ + a.chunk; }

  const comm::ProcessGrid* grid_;
  bool ordered_;
  int chunks_;
  int holder_of_last_ = 0;
  double timeout_s_;
  std::function<void(const schedule::Action&)> on_timeout_;
  std::unique_ptr<comm::Transport> transport_;  // between the replicas of this stage
  std::vector<comm::Transfer> sent_;            // per chunk: the sum in flight
  std::vector<schedule::Action> sent_action_;
  bool ordered_updates_ = true;
  std::vector<View1<T>> update_sums_;  // per chunk: the partial sum of the replicas before this one
};

// into(i) = from(i) + into(i): a replica's gradients added to the sum of those before it.
template <class T> void add_gradients(const ExecSpace& space, const View1<const T>& from, const View1<T>& into);

}  // namespace kpipe::runtime
