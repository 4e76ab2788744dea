#pragma once
// Combining the replicas' weight gradients, as the schedule's reduction says (schedule/reduction.hpp):
// "ordered" runs the running sum's actions where the lists have them (receive the sum into a chunk's
// gradient buffer, send it on from there) and ends with the last group's holder broadcasting the final
// sum; "allreduce" sums the replicas' buffers after the lists. Either way every replica ends the step with
// the same gradients.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/transport.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/schedule/reduction.hpp"

namespace kpipe::runtime {

template <class T> class GradientReduction {
 public:
  // `on_timeout` is called (and must not return) when a sum does not arrive within timeout_s.
  GradientReduction(const comm::ProcessGrid& grid, const schedule::Replicated& schedule, double timeout_s,
                    std::function<void(const schedule::Action&)> on_timeout);

  // recv_sum: the sum this chunk sent before has been received (its buffer is the one we receive into);
  // then the sum for the action's group arrives into the chunk's gradient buffer.
  void receive(model::Chunk<T>& chunk, const schedule::Action& action);
  // send_sum: the chunk's gradient buffer goes to the next group's holder (its weight gradients are done).
  void send(model::Chunk<T>& chunk, const schedule::Action& action);
  // After the step's lists: every chunk's gradients are the whole mini-batch's, on every replica. The
  // broadcast or allreduce is bounded by timeout_s; `step` names it if it does not complete.
  void finish(const std::vector<model::Chunk<T>*>& chunks, std::int64_t step);

 private:
  void wait(comm::Request& request, const schedule::Action& action);

  const comm::ProcessGrid* grid_;
  bool ordered_;
  int holder_of_last_ = 0;
  double timeout_s_;
  std::function<void(const schedule::Action&)> on_timeout_;
  std::unique_ptr<comm::Transport> transport_;  // between the replicas of this stage
  std::vector<comm::Request> sent_;             // per chunk: the sum in flight
  std::vector<schedule::Action> sent_action_;
};

}  // namespace kpipe::runtime
