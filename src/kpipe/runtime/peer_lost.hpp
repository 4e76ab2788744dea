#pragma once
// The one way a rank ends the job when a peer stops answering: a receive, send or sum that did not complete
// within pipeline.recv_timeout_s. The line says, in the user's terms, which rank, stage and node did not
// answer and what this rank was doing ("waiting for the activation of micro-batch 3 from rank 1 (stage 1 on
// node n2) in step 171"); then every rank is ended with ExitCode::peer_lost (core/exit_codes.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "kpipe/comm/grid.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::runtime {

struct WaitSite {
  std::string activity = "step";  // "step", "evaluation", "generation"
  std::int64_t step = 0;          // 0-based, as the trainer counts; the message counts from 1, as the log does
  std::size_t position = 0;       // in the list being run
};

// What this rank was doing at `action` and who it waited for: "waiting for the gradient of micro-batch 2 from
// rank 2 (stage 2 on node n2) in step 112".
std::string waiting_for(const comm::ProcessGrid& grid, const WaitSite& site, const schedule::Action& action);

[[noreturn]] void peer_lost(const comm::ProcessGrid& grid, const WaitSite& site, const schedule::Action& action,
                            int chunks, double timeout_s);

}  // namespace kpipe::runtime
