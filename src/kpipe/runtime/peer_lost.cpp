#include "kpipe/runtime/peer_lost.hpp"

#include <fmt/format.h>

#include "kpipe/core/exit_codes.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::runtime {

void peer_lost(const comm::ProcessGrid& grid, const WaitSite& site, const schedule::Action& action, int chunks,
               double timeout_s) {
  using schedule::Op;
  const bool sent = schedule::is_send(action.op) || action.op == Op::send_sum;
  const char* what = sent ? "not delivered" : action.op == Op::step ? "not completed" : "no message";
  abort_job(ExitCode::peer_lost,
            fmt::format("kpipe: rank {} (stage {}, replica {}) {} {} position {} ({}): {} within "
                        "pipeline.recv_timeout_s = {} s; aborting",
                        grid.world_rank, grid.stage, grid.replica, site.activity, site.step, site.position,
                        schedule::to_token(action, chunks), what, timeout_s));
}

}  // namespace kpipe::runtime
