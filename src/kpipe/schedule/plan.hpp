#pragma once
// The one pass pipeline: the lists a configuration runs, after every pass, each validated after it ran.
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/schedule/reduction.hpp"

namespace kpipe::schedule {

// How the messages of a run are delivered: buffered (MPI: a send never blocks, receives match by tag) or
// stream-ordered (NCCL, and its MPI emulation: messages in list order on one stream, a send may wait for its
// receive).
enum class Delivery : std::uint8_t { buffered, stream_ordered };
// How the data-parallel replicas' gradient sums travel: none (one replica), allreduce (after the lists, or at
// each asynchronous update), the ordered running sum on the run's own transport, or the ordered running sum by
// MPI from the host (where on the stream it would close a cycle).
enum class SumRoute : std::uint8_t { none, allreduce, ordered_on_transport, ordered_by_mpi };

struct PlanOptions {
  std::int64_t first_step = 0;  // > 0: an asynchronous run resumed at that step boundary
};

struct Plan {
  Replicated run;                   // every replica's lowered lists after every pass
  SumRoute sums = SumRoute::none;
  Delivery delivery = Delivery::buffered;
  std::vector<std::string> passes;  // the passes applied, in order
};

Plan plan(const Config& config, Delivery delivery, const PlanOptions& options = {});

}  // namespace kpipe::schedule
