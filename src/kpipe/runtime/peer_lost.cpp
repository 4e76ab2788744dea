#include "kpipe/runtime/peer_lost.hpp"

#include <fmt/format.h>

#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/step_number.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::runtime {

namespace {

// "rank 2 (stage 2 on node n2)", with the replica where there are several.
std::string who(const comm::ProcessGrid& grid, int world_rank) {
  const int stage = world_rank % grid.pipeline_size, replica = world_rank / grid.pipeline_size;
  return fmt::format("rank {} (stage {}{} on node {})", world_rank, stage,
                     grid.data_parallel > 1 ? fmt::format(" of replica {}", replica) : std::string(),
                     grid.node_of(world_rank));
}

}  // namespace

std::string waiting_for(const comm::ProcessGrid& grid, const WaitSite& site, const schedule::Action& action) {
  using schedule::Op;
  const std::string when = fmt::format("in {} {}", site.activity, step_number(site.step));
  // A pipeline message's peer is a stage of this replica; a running sum's, the same stage of another replica.
  const bool sum = action.op == Op::send_sum || action.op == Op::recv_sum;
  const int peer = sum ? action.peer * grid.pipeline_size + grid.stage : grid.replica * grid.pipeline_size + action.peer;
  std::string what;
  switch (action.op) {
    case Op::recv_activation:
    case Op::send_activation: what = fmt::format("the activation of micro-batch {}", action.microbatch); break;
    case Op::recv_gradient:
    case Op::send_gradient: what = fmt::format("the gradient of micro-batch {}", action.microbatch); break;
    case Op::recv_sum:
    case Op::send_sum: what = fmt::format("the weight gradients' running sum (group {})", action.microbatch); break;
    default: {
      // The transfers of the whole list (stream-ordered ones, NCCL): the neighbours in the pipeline.
      std::string neighbours;
      for (int stage : {grid.stage - 1, grid.stage + 1})
        if (stage >= 0 && stage < grid.pipeline_size)
          neighbours += (neighbours.empty() ? "" : " and ") + who(grid, grid.replica * grid.pipeline_size + stage);
      return fmt::format("waiting for its transfers with {} to complete {}",
                         neighbours.empty() ? std::string("the other replicas") : neighbours, when);
    }
  }
  const bool receiving = schedule::is_recv(action.op) || action.op == Op::recv_sum;
  return fmt::format("{} {} {} {} {}", receiving ? "waiting for" : "delivering", what, receiving ? "from" : "to",
                     who(grid, peer), when);
}

void peer_lost(const comm::ProcessGrid& grid, const WaitSite& site, const schedule::Action& action, int chunks,
               double timeout_s) {
  abort_job(ExitCode::peer_lost,
            fmt::format("{}: no answer within pipeline.recv_timeout_s = {:g} s while {} (list position {}, "
                        "{}): that rank, its node or the network to it is lost or stopped, or it waits for one "
                        "that is; ending the job",
                        who(grid, grid.world_rank), timeout_s, waiting_for(grid, site, action), site.position,
                        schedule::to_token(action, chunks)));
}

}  // namespace kpipe::runtime
