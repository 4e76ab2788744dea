#pragma once
// Each rank's memory predicted from the model description and the schedule, by category (category.hpp):
// the bytes kpipe's Kokkos allocations reach on that rank during training. The allocation meter
// (meter.hpp) measures the same categories; tests/mpi/test_memory.cpp holds the two equal, byte for byte,
// for every schedule on 1, 2 and 4 ranks.
//
// Per chunk: its parameters, gradients and optimizer moments (two, whatever the optimizer, and a byte of
// weight-decay mask per parameter); activation slots x the bytes a micro-batch keeps from its forward to
// its backward (the plan's buffer plans, which the runtime follows, say how many slots); sets of backward buffers
// x their bytes (one set with plain backwards, more when I and W run apart); the attention and
// recomputation scratch. Per rank: the spare [N, C] message buffers, the host token staging rows (inputs
// and targets of each micro-batch) and the per-micro-batch loss sums.
// Weight versions are 0 for every synchronous schedule (PipeDream's stashes will count there). With
// checkpoint.dir and checkpoint.async not off (auto counts as on), replica 0's snapshot buffer of each chunk.
#include <cstddef>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/schedule/plan.hpp"

namespace kpipe::memory {

struct ChunkMemory {
  int first_layer = 0, last_layer = 0;  // [first, last)
  std::int64_t parameters = 0;          // elements
  std::int64_t compute_copy_bytes = 0;  // the products' matrices in A (mixed precision)
  std::int64_t slot_bytes = 0;          // one activation slot
  std::int64_t backward_bytes = 0;      // one set of backward buffers
  std::int64_t workspace_bytes = 0;
  int slots = 0, backward_sets = 0;
};

struct RankMemory {
  int world_rank = 0, replica = 0, stage = 0;
  Bytes bytes{};  // per category
  std::vector<ChunkMemory> chunks;
  int message_buffers = 0;     // spare [N, C] buffers of the training lists
  int evaluation_buffers = 0;  // and of evaluation's forward-only lists
  std::int64_t total() const { return memory::total(bytes); }
};

// One rank (replica, stage) of the configuration, whose plan is `schedule` (schedule/plan.hpp: its lists, their
// buffer plans and its evaluation's), for a model whose masters, gradients and optimizer state are T and whose
// activations, messages and products' copy are A.
template <class T, class A>
RankMemory plan_rank_for(const Config& config, const model::ModelDesc& desc, const schedule::Plan& schedule,
                         int replica, int stage);
// The same for what kpipe-train runs: float masters, and A as train.precision says (bf16 or float).
RankMemory plan_rank(const Config& config, const model::ModelDesc& desc, const schedule::Plan& schedule, int replica,
                     int stage);
// Every rank, in world-rank order (replica * pipeline_size + stage).
std::vector<RankMemory> plan_ranks(const Config& config, const model::ModelDesc& desc, const schedule::Plan& schedule);

// "parameters 1.2 MiB, gradients 1.2 MiB, ..." (the non-zero categories).
std::string describe(const Bytes& bytes);

}  // namespace kpipe::memory
