#include "kpipe/comm/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/node.hpp"
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
  {
    const Watchdog watch(g.world_rank, {timeout_s, "splitting the world into pipelines and replicas"});
    MPI_Comm_split(world, g.replica, g.stage, &g.pipeline);
    MPI_Comm_split(world, g.stage, g.replica, &g.replicas);
  }
  std::vector<int> counts;
  const std::string all = allgatherv(node_name(), world, {timeout_s, "gathering the ranks' node names"}, &counts);
  auto nodes = std::make_shared<std::vector<std::string>>();
  std::size_t offset = 0;
  for (int count : counts) {
    nodes->push_back(all.substr(offset, std::size_t(count)));
    offset += std::size_t(count);
  }
  g.nodes = std::move(nodes);
  return g;
}

std::string describe_nodes(const ProcessGrid& grid) {
  // Runs of consecutive ranks on one node (block placement gives one run per node).
  struct Run {
    std::string node;
    int first, last;
  };
  std::vector<Run> runs;
  for (int r = 0; r < grid.world_size; ++r) {
    const std::string node = grid.node_of(r);
    if (runs.empty() || runs.back().node != node) runs.push_back({node, r, r});
    runs.back().last = r;
  }
  std::vector<std::string> names;
  int least = grid.world_size, most = 0;
  for (const Run& run : runs) {
    if (std::find(names.begin(), names.end(), run.node) == names.end()) names.push_back(run.node);
    least = std::min(least, run.last - run.first + 1);
    most = std::max(most, run.last - run.first + 1);
  }
  const std::string nodes = fmt::format("{} node{}", names.size(), names.size() == 1 ? "" : "s");
  if (runs.size() > 8)
    return least == most && runs.size() == names.size()
               ? fmt::format("{}, {} ranks each", nodes, most)
               : fmt::format("{} ({} runs of consecutive ranks, {} to {} ranks each)", nodes, runs.size(), least, most);
  std::string text = nodes + ":";
  for (const Run& run : runs)
    text += fmt::format("{} {} (rank{} {})", &run == &runs.front() ? "" : ",", run.node, run.first == run.last ? "" : "s",
                        run.first == run.last ? fmt::format("{}", run.first) : fmt::format("{}-{}", run.first, run.last));
  return text;
}

std::string ProcessGrid::node_of(int rank) const {
  return nodes && rank >= 0 && std::size_t(rank) < nodes->size() ? (*nodes)[std::size_t(rank)] : "?";
}

void free_grid(ProcessGrid& g) {
  if (g.pipeline != MPI_COMM_NULL) MPI_Comm_free(&g.pipeline);
  if (g.replicas != MPI_COMM_NULL) MPI_Comm_free(&g.replicas);
}

}  // namespace kpipe::comm
