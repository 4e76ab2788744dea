#include "kpipe/runtime/placement.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <thread>

#include "kpipe/build_config.hpp"
#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/node.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/kernel_path.hpp"
#include "kpipe/schedule/asynchronous.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kpipe::runtime {

namespace {

// GPUs this process can use (CUDA_VISIBLE_DEVICES applies); 0 on builds without a GPU backend.
int visible_gpus() {
#if defined(KOKKOS_ENABLE_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

constexpr bool threaded_host_backend() {
#if defined(KOKKOS_ENABLE_OPENMP) || defined(KOKKOS_ENABLE_THREADS) || defined(KOKKOS_ENABLE_HPX)
  return true;
#else
  return false;
#endif
}

constexpr bool nccl_built = build::nccl && !host_memory;

}  // namespace

comm::TransportKind default_transport(const PipelineConfig& pipeline) {
  if (pipeline.transport == TransportChoice::nccl) return comm::TransportKind::nccl;
  if (pipeline.transport == TransportChoice::mpi) return comm::TransportKind::mpi;
  return nccl_built ? comm::TransportKind::nccl : comm::TransportKind::mpi;
}

Placement place_rank(const PipelineConfig& pipeline, MPI_Comm world) {
  const double limit = pipeline.recv_timeout_s;
  const comm::NodeLayout node = comm::node_layout(world, limit);
  Placement p;
  p.ranks_on_node = node.local_size;
  p.gpus_on_node = visible_gpus();
  p.threads = pipeline.threads_per_rank;
  std::string error;
  if (p.threads > 1 && !threaded_host_backend())
    error = fmt::format("pipeline.threads_per_rank = {}: this kpipe's Kokkos has no threaded host backend "
                        "(Kokkos {}.{}, {}); use 0 or 1, or build against a Kokkos with OpenMP",
                        p.threads, KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100,
                        Kokkos::DefaultHostExecutionSpace::name());
  if (!host_memory) {
    if (p.gpus_on_node == 0 && error.empty())
      error = fmt::format("node {}: no GPU visible to rank {} of this node, and this kpipe runs its kernels on GPUs "
                          "(CUDA_VISIBLE_DEVICES?)", node.name, node.local_rank);
    else if (p.gpus_on_node > 0)
      p.device = node.local_rank % p.gpus_on_node;  // one GPU per rank where there are enough; else shared
  }
  // The transport, the same on every rank: NCCL only if every node gives each of its ranks a GPU of its own.
  int shares_gpu = !host_memory && node.local_size > p.gpus_on_node;
  shares_gpu = comm::allreduce(shares_gpu, MPI_MAX, world, {limit, "the placement's check of GPUs per node"});
  if (pipeline.transport == TransportChoice::nccl && error.empty()) {
    if (!nccl_built)
      error = fmt::format("pipeline.transport = \"nccl\": this kpipe was built {} (NCCL needs a CUDA build with "
                          "KPIPE_ENABLE_NCCL=ON); use \"mpi\" or \"auto\"",
                          host_memory ? "for host backends" : "without NCCL");
    else if (shares_gpu && node.local_size > p.gpus_on_node)
      error = fmt::format("pipeline.transport = \"nccl\": node {} runs {} ranks on {} GPUs, and NCCL refuses two "
                          "ranks on one GPU; start at most {} ranks per node, or use \"mpi\" or \"auto\"",
                          node.name, node.local_size, p.gpus_on_node, p.gpus_on_node);
    else if (shares_gpu)
      error = "pipeline.transport = \"nccl\": another node runs more ranks than it has GPUs, and NCCL refuses two "
              "ranks on one GPU; use \"mpi\" or \"auto\"";
  }
  // Every rank the same verdict: the first failing rank's line, thrown on all (every rank exits 2).
  const comm::Failure failure =
      comm::first_failure(world, {error.empty() ? 0 : 2, -1, error}, {limit, "the placement's agreement"});
  if (failure) throw InputError(failure.message);
  p.transport = default_transport(pipeline);
  if (p.transport == comm::TransportKind::nccl && shares_gpu) {
    p.transport = comm::TransportKind::mpi;
    p.note = fmt::format("pipeline.transport = \"auto\": {} ranks share {} GPU(s) on node {}, which NCCL refuses; "
                         "using MPI through pinned host buffers",
                         node.local_size, p.gpus_on_node, node.name);
  }
  const unsigned cores = std::thread::hardware_concurrency();
  if (p.note.empty() && p.threads > 0 && cores > 0 && unsigned(p.threads) * unsigned(node.local_size) > cores)
    p.note = fmt::format("pipeline.threads_per_rank = {} with {} ranks on node {} asks for {} threads of its {} "
                         "cores: oversubscribed", p.threads, node.local_size, node.name,
                         p.threads * node.local_size, cores);
  return p;
}

KokkosSession::KokkosSession(const Placement& placement) {
#if KOKKOS_VERSION >= 30700
  Kokkos::InitializationSettings settings;
  if (placement.threads > 0) settings.set_num_threads(placement.threads);
  if (placement.device >= 0) settings.set_device_id(placement.device);
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments arguments;
  if (placement.threads > 0) arguments.num_threads = placement.threads;
  if (placement.device >= 0) arguments.device_id = placement.device;
  Kokkos::initialize(arguments);
#endif
}

KokkosSession::~KokkosSession() { Kokkos::finalize(); }

}  // namespace kpipe::runtime
