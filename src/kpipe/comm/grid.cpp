#include "kpipe/comm/grid.hpp"

#include <cstdint>

#include "kpipe/comm/watchdog.hpp"
#include "kpipe/core/error.hpp"

namespace kpipe::comm {

ProcessGrid make_grid(MPI_Comm world, int pipeline_size, int data_parallel, double timeout_s) {
  ProcessGrid g;
  MPI_Comm_rank(world, &g.world_rank);
  MPI_Comm_size(world, &g.world_size);
  require(pipeline_size >= 1, "pipeline.pipeline_size = {}: must be at least 1", pipeline_size);
  require(data_parallel >= 1, "pipeline.data_parallel = {}: must be at least 1", data_parallel);
  // In 64 bits: 641 x 6700417 is 2^32 + 1, which an int product would wrap to 1.
  require(std::int64_t(g.world_size) == std::int64_t(pipeline_size) * data_parallel,
          "MPI world size {} != pipeline.pipeline_size = {} x pipeline.data_parallel = {}", g.world_size,
          pipeline_size, data_parallel);
  g.world = world;
  g.pipeline_size = pipeline_size;
  g.data_parallel = data_parallel;
  g.stage = g.world_rank % pipeline_size;
  g.replica = g.world_rank / pipeline_size;
  const Watchdog watch(g.world_rank, {timeout_s, "splitting the world into pipelines and replicas"});
  MPI_Comm_split(world, g.replica, g.stage, &g.pipeline);
  MPI_Comm_split(world, g.stage, g.replica, &g.replicas);
  return g;
}

void free_grid(ProcessGrid& g) {
  if (g.pipeline != MPI_COMM_NULL) MPI_Comm_free(&g.pipeline);
  if (g.replicas != MPI_COMM_NULL) MPI_Comm_free(&g.replicas);
}

}  // namespace kpipe::comm
