#include "kpipe/memory/limit.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/node.hpp"
#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/bytes.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/host_memory.hpp"
#include "kpipe/memory/cgroup.hpp"
#include "kpipe/memory/plan.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kpipe::memory {

namespace {

// What this rank's memory comes from, and who else on the node draws from the same: the node's MemAvailable
// (every rank of the node), a memory cgroup's limit (the node's ranks in the same group), or one GPU's free
// memory (the node's ranks on that GPU).
struct Source {
  std::int64_t bytes = -1;  // -1: none (no cgroup limit; unknown)
  std::int64_t id = 0;      // equal on the ranks that share it
  std::string what;         // "MemAvailable", "the memory cgroup's limit ...", for the message
};

constexpr int sources_per_rank = 2;

std::array<Source, sources_per_rank> sources_here() {
  std::array<Source, sources_per_rank> here;
#if defined(KOKKOS_ENABLE_CUDA)
  std::size_t free = 0, total = 0;
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess)
    here[0] = {std::int64_t(free), device, fmt::format("the free memory of GPU {}", device)};
#else
  if (const std::int64_t bytes = node_memory_available(); bytes >= 0) here[0] = {bytes, 0, "the node's MemAvailable"};
  if (const auto group = cgroup_memory())
    here[1] = {group->remaining(), std::int64_t(std::hash<std::string>{}(group->group) >> 1),
               fmt::format("the memory cgroup's limit ({} less {} in use, cgroup v{} {})", format_bytes(group->limit),
                           format_bytes(group->used), group->version, group->group)};
#endif
  return here;
}

}  // namespace

Limit resolve_limit(const std::string& setting, MPI_Comm world, double timeout_s) {
  if (setting == "none") return {std::nullopt, "memory.limit_per_rank = none"};
  if (setting != "auto") {
    const auto bytes = parse_bytes(setting);
    require(bytes.has_value(), "memory.limit_per_rank = '{}': expected auto, none or a size such as 6GiB", setting);
    return {*bytes, fmt::format("memory.limit_per_rank = {}", setting)};
  }
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  // The ranks on this node that share what this rank draws from.
  const auto here = sources_here();
  MPI_Comm node = MPI_COMM_NULL;
  {
    const comm::Watchdog watch(rank, {timeout_s, "splitting the ranks by node for memory.limit_per_rank = auto"});
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);  // no non-blocking form
  }
  const comm::Bound bound{timeout_s, "agreeing on memory.limit_per_rank = auto"};
  std::vector<std::int64_t> ids;
  for (const Source& source : here) ids.push_back(source.id);
  const std::vector<std::int64_t> all = comm::allgather(ids, node, bound);
  MPI_Comm_free(&node);
  const std::string node_name = comm::node_name();
  // This rank's share: the smallest over its sources of what the source has left / the ranks sharing it.
  std::int64_t share = std::numeric_limits<std::int64_t>::max();
  std::string why;
  for (std::size_t k = 0; k < here.size(); ++k) {
    if (here[k].bytes < 0) continue;
    int sharing = 0;
    for (std::size_t r = k; r < all.size(); r += here.size()) sharing += all[r] == here[k].id ? 1 : 0;
    if (here[k].bytes / sharing >= share) continue;
    share = here[k].bytes / sharing;
    why = fmt::format("{} on node {}{}", here[k].what, node_name,
                      sharing > 1 ? fmt::format(", shared by {} ranks", sharing) : "");
  }
  // The smallest share over the job, in the words of the lowest rank that has it (every rank says the same).
  const std::int64_t least = comm::allreduce(share, MPI_MIN, world, bound);
  if (least == std::numeric_limits<std::int64_t>::max())
    return {std::nullopt, "memory.limit_per_rank = auto (the available memory is unknown here: no limit)"};
  const int holder = comm::allreduce(share == least ? rank : std::numeric_limits<int>::max(), MPI_MIN, world, bound);
  why = comm::bcast(why, holder, world, bound);
  return {least, fmt::format("memory.limit_per_rank = auto ({}: {})", format_bytes(least), why)};
}

void enforce_parameter_bound(const Config& config, const Limit& limit) {
  if (!limit.bytes) return;
  // Weights, gradients and two optimizer moments: 16 bytes a parameter at the least; the largest stage holds at
  // least its share.
  constexpr double bytes_per_parameter = 4 * sizeof(float);
  const double parameters = model::parameter_count(config.model);
  const double per_rank = bytes_per_parameter * parameters / config.pipeline.pipeline_size;
  if (per_rank <= double(*limit.bytes)) return;
  const auto& m = config.model;
  throw InputError(fmt::format(
      "{}: the model's {:.3g} parameters (model.n_layers = {}, model.d_model = {}, model.vocab = {}) need at "
      "least {} per rank on {} stage{} for weights, gradients and optimizer moments (16 bytes each), before any "
      "activation: a smaller model or more pipeline stages",
      limit.why, parameters, m.n_layers, m.d_model, m.vocab,
      format_estimated_bytes(per_rank),
      config.pipeline.pipeline_size, config.pipeline.pipeline_size == 1 ? "" : "s"));
}

std::string enforce_limit(Config& config, const Limit& limit, const model::ModelDesc& desc,
                          const schedule::Plan& schedule, MPI_Comm world) {
  const auto worst_of = [&] {
    const auto ranks = plan_ranks(config, desc, schedule);
    std::pair<RankMemory, int> worst{ranks.front(), 0};  // the rank that needs the most, and how many exceed
    for (const auto& r : ranks) {
      if (r.total() > worst.first.total()) worst.first = r;
      worst.second += limit.bytes && r.total() > *limit.bytes ? 1 : 0;
    }
    return worst;
  };
  auto found = worst_of();
  RankMemory& worst = found.first;  // references, not structured bindings: the lambda below captures them
  int& over = found.second;
  const auto fits = [&] {
    return fmt::format("{}: rank {} needs the most, {}", limit.why, worst.world_rank, format_bytes(worst.total()));
  };
  if (!limit.bytes || worst.total() <= *limit.bytes) return fits();
  // checkpoint.async = auto gives way to synchronous checkpoints where its snapshot alone does not fit.
  const std::int64_t snapshot = worst.bytes[int(Category::snapshot)];
  if (snapshot > 0 && config.checkpoint.async == CheckpointAsync::automatic) {
    config.checkpoint.async = CheckpointAsync::off;
    const auto without = worst_of();
    if (without.first.total() <= *limit.bytes) {
      int rank = 0;
      MPI_Comm_rank(world, &rank);
      if (rank == 0)
        fmt::print(stderr, "kpipe-train: note: checkpoint.async = auto: writing checkpoints synchronously: the "
                           "snapshot buffer ({}) would take rank {} to {}, over {}\n",
                   format_bytes(snapshot), worst.world_rank, format_bytes(worst.total()), limit.why);
      std::tie(worst, over) = without;
      return fits();
    }
    std::tie(worst, over) = without;
  }
  const std::string others = over == 1   ? ""
                             : over == 2 ? ", and 1 other rank exceeds it too"
                                         : fmt::format(", and {} other ranks exceed it too", over - 1);
  throw InputError(fmt::format(
      "{}: rank {} needs {} ({}){}; fewer micro-batches in flight (schedule), recomputation (memory.recompute), "
      "more pipeline stages or a smaller model: kpipe-sim recommend finds a layout that fits",
      limit.why, worst.world_rank, format_bytes(worst.total()), describe(worst.bytes), others));
}

}  // namespace kpipe::memory
