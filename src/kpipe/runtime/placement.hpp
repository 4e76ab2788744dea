#pragma once
// Placing a rank on its node before Kokkos starts: how many host threads its Kokkos gets
// (pipeline.threads_per_rank), which GPU it drives (its node-local rank), and which transport moves its
// stage's data (pipeline.transport, "auto" resolved). Then Kokkos is started with exactly that.
//
//   Placement placement = runtime::place_rank(config.pipeline, MPI_COMM_WORLD);  // before Kokkos
//   runtime::KokkosSession kokkos(placement);
//   ... placement.transport: mpi or nccl
//
// Bad combinations are InputErrors, raised identically on every rank (one line, exit 2): NCCL asked for on a
// build without it (or without GPUs), NCCL with more ranks on a node than it has GPUs (NCCL refuses two ranks
// on one GPU), threads per rank on a build whose Kokkos has no threaded host backend.
#include <mpi.h>

#include <string>

#include "kpipe/comm/transport.hpp"
#include "kpipe/core/config.hpp"

namespace kpipe::runtime {

struct Placement {
  int threads = 0;        // Kokkos host threads; 0: Kokkos' own choice (OMP_NUM_THREADS)
  int device = -1;        // GPU on the node, by node-local rank; -1: none (host backends)
  int gpus_on_node = 0;   // GPUs this rank sees
  int ranks_on_node = 1;
  comm::TransportKind transport = comm::TransportKind::mpi;
  std::string note;       // one line worth telling the user (a fallback, oversubscribed cores); may be empty
};

// Collective over world (every rank calls it, before Kokkos is initialized).
Placement place_rank(const PipelineConfig& pipeline, MPI_Comm world);

// "auto" without looking at the node: NCCL where kpipe is built with it and its buffers live on a GPU, MPI
// otherwise.
// What a Trainer built without place_rank (tests, library users) uses.
comm::TransportKind default_transport(const PipelineConfig& pipeline);

// pipeline.transport as the placement resolved it (mpi or nccl), for a run configured after place_rank.
constexpr TransportChoice resolved_choice(comm::TransportKind kind) {
  return kind == comm::TransportKind::nccl ? TransportChoice::nccl : TransportChoice::mpi;
}

// Kokkos initialized with the placement's threads and device for the object's lifetime (Kokkos 4's
// InitializationSettings, Kokkos 3's InitArguments). Kokkos' environment variables still apply to everything
// the placement leaves open.
class KokkosSession {
 public:
  explicit KokkosSession(const Placement& placement);
  ~KokkosSession();
  KokkosSession(const KokkosSession&) = delete;
  KokkosSession& operator=(const KokkosSession&) = delete;
};

}  // namespace kpipe::runtime
