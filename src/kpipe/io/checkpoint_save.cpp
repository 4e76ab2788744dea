// Saving: every rank's share written to a temporary file, published once all of it is on storage.
#include "kpipe/io/checkpoint.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/io/checkpoint_common.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/version.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

using namespace detail;

// The metadata: the same on every rank (rank 0's clock), all of it in the checksummed manifest.
template <class T>
void detail::add_metadata(CheckpointWriter& writer, const Config& config, const model::ModelDesc& desc, std::int64_t step,
                  const std::string& run_id, const std::string& created) {
  std::int64_t tensors = 0;
  for (const auto& layer : desc.layers) tensors += std::int64_t(layer.params.size());
  writer.set_attribute("/", "step", step);
  writer.set_attribute("/", "run_id", run_id);
  writer.set_attribute("/", "kpipe_version", std::string(kpipe::version));
  writer.set_attribute("/", "created", created);
  writer.set_attribute("/", "config", to_toml(config));
  writer.set_attribute("/", "scalar_type", std::string(type_name<T>()));
  // What the run computed in; the tensors are its masters (scalar_type) whatever it is, so any precision loads.
  writer.set_attribute("/", "precision", std::string(to_string(config.train.precision)));
  writer.set_attribute("/", "pipeline_size", std::int64_t(config.pipeline.pipeline_size));
  writer.set_attribute("/", "data_parallel", std::int64_t(config.pipeline.data_parallel));
  writer.set_attribute("/", "chunks", std::int64_t(config.pipeline.chunks));
  writer.set_attribute("/", "schedule",
                       config.pipeline.schedule_file.empty() ? std::string(to_string(config.pipeline.schedule))
                                                             : config.pipeline.schedule_file);
  writer.set_attribute("/", "tensors", tensors);
  writer.set_attribute("/optimizer", "kind", std::string(to_string(config.optim.kind)));
  // AdamW's bias correction uses the count of updates so far, which is the step counter.
  writer.set_attribute("/optimizer", "step", step);
  writer.set_attribute("/training", "step", step);
  writer.set_attribute("/training", "seed", std::int64_t(config.train.seed));
  writer.set_attribute("/training", "sampler",
                       std::string("windows keyed by (train.seed, step, sequence): the step is the sampler's position"));
  writer.set_attribute("/training", "rng",
                       std::string("none beyond train.seed: initialization is keyed by (seed, layer, name), sampling "
                                   "by (seed, step, sequence)"));
}

template void detail::add_metadata<float>(CheckpointWriter&, const Config&, const model::ModelDesc&, std::int64_t,
                                          const std::string&, const std::string&);

namespace {

// Whether this step's checkpoint may be written: never one with a non-finite value (every rank checks its
// state, all agree), never over another run's checkpoint of the same step (checkpoint.other_runs = "keep").
// Returns why not, the same on every rank, or an empty string.
template <class T, class A>
std::string reason_not_to_save(runtime::StageModel<T, A>& stage, const std::string& name, const std::string& path,
                               const CheckpointDir& dir, const comm::Bound& bound) {
  const auto& grid = stage.grid();
  int bad = 0;
  for (int c = 0; c < stage.chunks(); ++c) {
    const auto& store = stage.chunk(c).params();
    for (const auto* buffer : {&store.values(), &store.moment1(), &store.moment2()})
      if (!std::isfinite(nn::sum_squares<T>(ExecSpace(), *buffer))) bad = 1;
  }
  if (comm::allreduce(bad, MPI_MAX, grid.world, bound))
    return fmt::format("checkpoint {} not written: the model or optimizer state holds non-finite values", name);
  comm::Failure clash;
  if (grid.world_rank == 0 && fs::exists(path)) {
    const std::string owner = run_of(path);
    if (owner != dir.run_id())
      clash = {1, 0, fmt::format("checkpoint {} not written: {} belongs to another run ({}) and is not replaced", name,
                                 path, owner.empty() ? "unreadable" : owner)};
  }
  return comm::first_failure(grid.world, clash, bound).message;
}

// This rank's share of the tensors: replica 0's (replicas hold identical copies), with the older versions the
// micro-batches in flight read (asynchronous runs: resume forwards them again). The host copies go into
// `buffers`, which must outlive the write.
template <class T, class A>
void add_tensors(CheckpointWriter& writer, runtime::StageModel<T, A>& stage, std::int64_t step,
                 std::vector<std::vector<T>>& buffers) {
  for (int c = 0; c < stage.chunks() && stage.grid().replica == 0; ++c) {
    const auto& store = stage.chunk(c).params();
    const auto add = [&](const std::string& root, std::vector<T> values) {
      buffers.push_back(std::move(values));
      for (const auto& slot : store.slots())
        writer.add_tensor(root + slot.path(), slot.spec->shape, buffers.back().data() + slot.offset);
    };
    add(model_root, host_copy(store.values()));
    add(moment1_root, host_copy(store.moment1()));
    add(moment2_root, host_copy(store.moment2()));
    for (int j = 1; j <= stage.older_versions(c, step); ++j) {
      std::vector<T> values = stage.older_version(c, j);
      if (!values.empty()) add(older_version_root(j), std::move(values));  // empty: read by no micro-batch in flight
    }
  }
}

// Once every rank's bytes are on storage, rank 0 publishes the file, then `latest`, then prunes. Returns the
// failure (agreed by all ranks) and sets `warning` (pruning only) on every rank.
comm::Failure publish(const CheckpointDir& dir, const comm::ProcessGrid& grid, const std::string& tmp,
                      const SaveResult& result, const std::string& name, std::uint64_t manifest_hash,
                      const comm::Bound& bound, std::string& warning) {
  comm::Failure failed;
  if (grid.world_rank == 0) {
    try {
      publish_file(tmp, result.path);
    } catch (const std::exception& e) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      failed = {1, 0, fmt::format("checkpoint {} not published: {}", name, e.what())};
    }
    if (!failed) {
      try {
        write_latest(dir.path(), {name, dir.run_id(), manifest_hash, true});
      } catch (const std::exception& e) {
        failed = {1, 0, fmt::format("checkpoint {} written, but `latest` could not be updated: {}", name, e.what())};
      }
    }
    if (!failed) {
      try {
        prune_checkpoints(dir.path(), dir.run_id(), dir.config().keep, dir.locked());
      } catch (const std::exception& e) {
        warning = fmt::format("pruning old checkpoints failed: {}", e.what());
      }
    }
  }
  auto agreed = comm::first_failure(grid.world, failed, bound);
  if (!agreed) warning = comm::bcast(warning, 0, grid.world, bound);
  return agreed;
}

}  // namespace

template <class T, class A>
SaveResult save_checkpoint(runtime::StageModel<T, A>& stage, std::int64_t step, const data::Tokenizer& tokenizer,
                           CheckpointDir& dir) {
  const auto& grid = stage.grid();
  stage.bind_newest();  // the parameters are the newest version (asynchronous runs)
  const std::string name = checkpoint_file_name(step);
  SaveResult result;
  result.path = (fs::path(dir.path()) / name).string();
  const std::string tmp = (fs::path(dir.path()) / temporary_file_name(step, dir.run_id())).string();
  const comm::Bound bound{dir.timeout_s(), fmt::format("writing checkpoint {}", name), grid.nodes};
  result.message = reason_not_to_save(stage, name, result.path, dir, bound);
  if (!result.message.empty()) return result;

  CheckpointWriter writer(grid.world, dir.timeout_s());
  std::vector<std::vector<T>> buffers;  // the host copies, alive until written
  add_tensors(writer, stage, step, buffers);
  const std::string created = comm::bcast(grid.world_rank == 0 ? utc_now() : std::string(), 0, grid.world, bound);
  add_metadata<T>(writer, stage.config(), stage.desc(), step, dir.run_id(), created);
  // What the model's token ids mean, so that kpipe-generate decodes them (io/checkpoint_tokenizer.hpp).
  add_tokenizer(writer, tokenizer, grid.world_rank == 0);
  const WriteStatus status = writer.write(tmp);
  if (!status.ok) {
    if (grid.world_rank == 0) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
    }
    result.message = fmt::format("checkpoint {} not written: {}", name, status.message);
    return result;
  }
  if (const auto failed = publish(dir, grid, tmp, result, name, status.manifest_hash, bound, result.warning)) {
    result.message = failed.message;
    return result;
  }
  result.ok = true;
  return result;
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template SaveResult save_checkpoint(runtime::StageModel<T, A>&, std::int64_t, const data::Tokenizer&,               \
                                      CheckpointDir&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io
