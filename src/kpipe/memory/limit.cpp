#include "kpipe/memory/limit.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/bytes.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/memory/plan.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kpipe::memory {

namespace {

// Bytes this process could still get, and an id of what it shares them with (the node, or its device).
struct Available {
  std::int64_t bytes = -1;  // -1: unknown
  long long shared_id = 0;
  const char* what = "node";
};

Available available_here() {
  Available a;
#if defined(KOKKOS_ENABLE_CUDA)
  std::size_t free = 0, total = 0;
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess) {
    a.bytes = std::int64_t(free);
    a.shared_id = device;
    a.what = "GPU";
  }
#else
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream in(line);
    std::string key;
    long long kib = 0;
    if (in >> key >> kib && key == "MemAvailable:") a.bytes = kib * 1024;
  }
#endif
  return a;
}

}  // namespace

Limit resolve_limit(const std::string& setting, MPI_Comm world, double timeout_s) {
  if (setting == "none") return {std::nullopt, "memory.limit_per_rank = none"};
  if (setting != "auto") {
    const auto bytes = parse_bytes(setting);
    require(bytes.has_value(), "memory.limit_per_rank = '{}': expected auto, none or a size such as 6GiB", setting);
    return {*bytes, fmt::format("memory.limit_per_rank = {}", setting)};
  }
  // The ranks on this node that share what this rank draws from (the node's memory, or one GPU).
  const Available here = available_here();
  MPI_Comm node = MPI_COMM_NULL;
  {
    int rank = 0;
    MPI_Comm_rank(world, &rank);
    const comm::Watchdog watch(rank, {timeout_s, "splitting the ranks by node for memory.limit_per_rank = auto"});
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);  // no non-blocking form
  }
  int node_size = 1;
  MPI_Comm_size(node, &node_size);
  const comm::Bound bound{timeout_s, "agreeing on memory.limit_per_rank = auto"};
  const std::vector<std::int64_t> ids =
      comm::allgather(std::vector<std::int64_t>{std::int64_t(here.shared_id)}, node, bound);
  MPI_Comm_free(&node);
  int sharing = 0;
  for (std::int64_t id : ids) sharing += id == here.shared_id ? 1 : 0;
  // The smallest share over the job; unknown (-1) counts as unlimited.
  const std::int64_t share = here.bytes < 0 ? -1 : here.bytes / sharing;
  const std::int64_t least[2] = {
      comm::allreduce(share < 0 ? std::numeric_limits<std::int64_t>::max() : share, MPI_MIN, world, bound),
      comm::allreduce(std::int64_t(sharing), MPI_MAX, world, bound)};
  if (least[0] == std::numeric_limits<std::int64_t>::max())
    return {std::nullopt, "memory.limit_per_rank = auto (the available memory is unknown here: no limit)"};
  return {least[0], fmt::format("memory.limit_per_rank = auto ({}: the memory available on the {}{})",
                                format_bytes(least[0]), here.what,
                                least[1] > 1 ? fmt::format(", shared by {} ranks", least[1]) : "")};
}

void enforce_limit(Config& config, const model::ModelDesc& desc, const schedule::Replicated& schedule,
                   MPI_Comm world) {
  const Limit limit = resolve_limit(config.memory.limit_per_rank, world, config.pipeline.recv_timeout_s);
  if (!limit.bytes) return;
  const auto worst_of = [&] {
    const auto ranks = plan_ranks(config, desc, schedule);
    std::pair<RankMemory, int> worst{ranks.front(), 0};  // the rank that needs the most, and how many exceed
    for (const auto& r : ranks) {
      if (r.total() > worst.first.total()) worst.first = r;
      worst.second += r.total() > *limit.bytes ? 1 : 0;
    }
    return worst;
  };
  auto [worst, over] = worst_of();
  if (worst.total() <= *limit.bytes) return;
  // checkpoint.async = auto gives way to synchronous checkpoints where its snapshot alone does not fit.
  const std::int64_t snapshot = worst.bytes[int(Category::snapshot)];
  if (snapshot > 0 && config.checkpoint.async == CheckpointAsync::automatic) {
    config.checkpoint.async = CheckpointAsync::off;
    const auto without = worst_of();
    if (without.first.total() <= *limit.bytes) {
      int rank = 0;
      MPI_Comm_rank(world, &rank);
      if (rank == 0)
        fmt::print(stderr, "kpipe: note: checkpoint.async = auto: writing checkpoints synchronously: the snapshot "
                           "buffer ({}) would take rank {} to {}, over {}\n",
                   format_bytes(snapshot), worst.world_rank, format_bytes(worst.total()), limit.why);
      return;
    }
    std::tie(worst, over) = without;
  }
  throw InputError(fmt::format(
      "{}: rank {} needs {} ({}){}; fewer micro-batches in flight (schedule), recomputation (memory.recompute), "
      "more pipeline stages or a smaller model: kpipe-sim --recommend finds a layout that fits",
      limit.why, worst.world_rank, format_bytes(worst.total()), describe(worst.bytes),
      over > 1 ? fmt::format(", and {} other ranks exceed it too", over - 1) : ""));
}

}  // namespace kpipe::memory
