#pragma once
// The one way a rank ends the job when a peer stops answering: a receive, send or sum that did not complete
// within pipeline.recv_timeout_s. The line names this rank, the step, the position in its list and the action
// that waited, then every rank is ended with ExitCode::peer_lost (core/exit_codes.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "kpipe/comm/grid.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

struct WaitSite {
  std::string activity = "step";  // "step", "evaluation", "generation"
  std::int64_t step = 0;
  std::size_t position = 0;      // in the list being run
};

[[noreturn]] void peer_lost(const comm::ProcessGrid& grid, const WaitSite& site, const schedule::Action& action,
                            int chunks, double timeout_s);

}  // namespace kpipe::runtime
