#pragma once
// memory.limit_per_rank: the most memory a rank may need, checked against the memory plan (plan.hpp) on
// every rank before anything is allocated, so that a layout that cannot fit is refused with the figures
// instead of being killed by the kernel's OOM killer half-way through the first step.
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kpipe/core/config.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/schedule/plan.hpp"

namespace kpipe::memory {

struct Limit {
  std::optional<std::int64_t> bytes;  // none: no limit
  std::string why;                    // where the figure comes from, for messages
};

// "none", a size ("6GiB"), or "auto": the memory left to this rank, the smallest over `world` so that every rank
// holds the same limit. On the host the smaller of the node's MemAvailable (/proc/meminfo) divided among the
// node's ranks and the memory its cgroup still allows (memory/cgroup.hpp) divided among the node's ranks in
// that cgroup; on CUDA the free memory of the rank's device divided among the node's ranks on it. `why` names
// the one that bound it, its node and how many ranks share it. Collective over world for "auto".
// Its collectives are bounded by timeout_s (pipeline.recv_timeout_s).
Limit resolve_limit(const std::string& setting, MPI_Comm world, double timeout_s);

// Before the model is described: throws InputError when its parameters alone, with their gradients and
// optimizer moments, cannot fit the limit on the pipeline's stages however they are cut (a model of 10^9
// layers is refused at once, with its figures, rather than after minutes of describing it).
void enforce_parameter_bound(const Config& config, const Limit& limit);

// Plans every rank's memory and throws InputError (the same on every rank) when one exceeds the limit:
//   memory.limit_per_rank = 512MiB: rank 0 needs 1.25 GiB (parameters 25.0 MiB, ..., activations 900 MiB)...
// Under checkpoint.async = auto, a layout that fits only without the snapshot buffer sets it off instead (one
// line on world rank 0 says why). Otherwise returns the limit and the largest need, for the run's start-up line:
//   memory.limit_per_rank = auto (11.2 GiB: the node's MemAvailable on node n1, shared by 2 ranks): rank 1 needs
//   the most, 540 KiB
// Collective over world only for rank 0's note.
std::string enforce_limit(Config& config, const Limit& limit, const model::ModelDesc& desc,
                          const schedule::Plan& schedule, MPI_Comm world);

}  // namespace kpipe::memory
