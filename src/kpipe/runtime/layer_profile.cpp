#include "kpipe/runtime/layer_profile.hpp"

#include <mpi.h>

#include "kpipe/comm/bounded.hpp"

#include "kpipe/core/precisions.hpp"
#include "kpipe/planner/profile.hpp"

namespace kpipe::runtime {

template <class T, class A>
void write_layer_profile(const StageModel<T, A>& stage, const std::string& path, double optimizer_seconds, int steps) {
  const auto& grid = stage.grid();
  const auto& config = stage.config();
  // Every layer is on one rank of each pipeline: the sum over a pipeline puts each in its place.
  const auto mine = stage.layer_seconds();
  std::vector<double> all(mine.size() * 4);
  for (std::size_t l = 0; l < mine.size(); ++l)
    for (int k = 0; k < 4; ++k) all[4 * l + k] = mine[l][k];
  const comm::Bound bound{config.pipeline.recv_timeout_s, "gathering the layer profile"};
  comm::allreduce(all, MPI_SUM, grid.pipeline, bound);
  std::int64_t params = 0;
  for (int c = 0; c < stage.chunks(); ++c) params += stage.chunk(c).params().size();
  const double per_parameter = params > 0 ? optimizer_seconds / double(params) : 0.0;
  const double mean = comm::allreduce(per_parameter, MPI_SUM, grid.world, bound);
  if (grid.world_rank != 0) return;
  planner::Profile p;
  p.model = config.model;
  p.sequences = config.train.batch / config.train.microbatches;
  p.recompute = config.memory.recompute;
  p.steps = steps;
  p.optimizer = mean / grid.world_size;
  const int layers = int(mine.size()), blocks = layers - 2;
  for (int k = 0; k < 4; ++k) {
    p.embedding[k] = all[k] / p.sequences;
    p.head[k] = all[4 * (layers - 1) + k] / p.sequences;
    for (int b = 1; b <= blocks; ++b) p.block[k] += all[4 * b + k] / p.sequences / blocks;
  }
  planner::write_profile(path, p);
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template void write_layer_profile(const StageModel<T, A>&, const std::string&, double, int);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
