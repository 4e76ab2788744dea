#pragma once
// How a run's messages travel, as far as the schedule is concerned: the semantics a transport gives the
// pipeline's sends and receives (Delivery), and the way the data-parallel replicas' gradient sums go
// (SumRoute). The schedule part cannot name the transports themselves (comm/transport.hpp lies above it);
// the runtime says which Delivery its transport has, and the tools say which one they plan for.
#include <array>
#include <cstdint>
#include <string_view>

#include "kpipe/core/config.hpp"

namespace kpipe::schedule {

// buffered: MPI. A send never blocks (the executor waits on it later, where delivery.hpp says), a receive
// waits for its message, and messages match by tag, in whatever order they are posted.
// stream_ordered: NCCL, and its emulation on MPI. Each rank issues its messages in list order on one stream,
// every run of consecutive messages as one group; a send may wait until its receive has been issued, and
// the k-th send from a to b meets the k-th receive at b from a (no tags).
enum class Delivery : std::uint8_t { buffered, stream_ordered };

// How the replicas' gradient sums travel (what runtime/gradient_reduction needs to know): none (one
// replica); allreduce (after the lists, or at each asynchronous update); the ordered running sum on the
// run's own transport (synchronous: the ss/rs actions in the lists; asynchronous: the chain at each update);
// or the ordered running sum by MPI from the host, tagged, where on a stream-ordered transport it would close
// a cycle.
enum class SumRoute : std::uint8_t { none, allreduce, ordered_on_transport, ordered_by_mpi };

// The delivery a tool plans for when the configuration says pipeline.transport: "nccl" is stream-ordered;
// "mpi" buffered; "auto", which kpipe-train resolves per build when it runs (NCCL on a CUDA build with NCCL
// and a GPU per rank), is taken as buffered by tools that do not run (kpipe-sim, the recommender).
Delivery planned_delivery(TransportChoice transport);

}  // namespace kpipe::schedule

namespace kpipe {
template <> struct EnumText<schedule::Delivery> {
  static constexpr std::array<std::string_view, 2> names{"buffered", "stream-ordered"};
};
template <> struct EnumText<schedule::SumRoute> {
  static constexpr std::array<std::string_view, 4> names{"none", "allreduce", "ordered-on-transport",
                                                         "ordered-by-mpi"};
};
}  // namespace kpipe
