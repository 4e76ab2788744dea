// Saving: every rank's share written to a temporary file, published once all of it is on storage.
#include "kpipe/io/checkpoint.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/core/all_finite.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/io/checkpoint_common.hpp"
#include "kpipe/io/checkpoint_snapshot.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/version.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

using namespace detail;

// The metadata: the same on every rank (rank 0's clock), all of it in the checksummed manifest.
template <class T>
void detail::add_metadata(CheckpointWriter& writer, const Config& config, std::int64_t tensors, std::int64_t step,
                          const std::string& run_id, const std::string& created,
                          std::optional<std::uint64_t> state_hash) {
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
  // What the replicas agreed on; a load hashes what it loaded and compares.
  if (state_hash) writer.set_attribute("/", "state_hash", hash_hex(*state_hash));
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

template void detail::add_metadata<float>(CheckpointWriter&, const Config&, std::int64_t, std::int64_t,
                                          const std::string&, const std::string&, std::optional<std::uint64_t>);

namespace {

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

// Whether this step's checkpoint may be written: never one with a non-finite value (every rank checks its
// share, all agree). Returns why not, the same on every rank, or an empty string.
template <class T>
std::string reason_not_to_save(const Snapshot<T>& snapshot, const std::string& name, const comm::Bound& bound,
                               MPI_Comm comm) {
  int bad = 0;
  for (const auto& [first, count] : snapshot.must_be_finite) bad |= all_finite(first, count) ? 0 : 1;
  if (comm::allreduce(bad, MPI_MAX, comm, bound))
    return fmt::format("checkpoint {} not written: the model or optimizer state holds non-finite values", name);
  return {};
}

// Another run's checkpoint of this step, kept where it is (checkpoint.other_runs = "keep"): why this run's is
// not written, the same on every rank, or an empty string.
std::string other_runs_checkpoint(const std::string& name, const std::string& path, const CheckpointDir& dir,
                                  const comm::Bound& bound) {
  comm::Failure clash;
  if (rank_in(dir.comm()) == 0 && fs::exists(path)) {
    const std::string owner = run_of(path);
    if (owner != dir.run_id())
      clash = {1, 0, fmt::format("checkpoint {} not written: {} belongs to another run ({}), kept as "
                                 "checkpoint.other_runs = \"keep\" asks",
                                 name, path, owner.empty() ? "unreadable" : owner)};
  }
  return comm::first_failure(dir.comm(), clash, bound).message;
}

// Once every rank's bytes are on storage, rank 0 publishes the file, then `latest`, then prunes. Returns the
// failure (agreed by all ranks) and sets `warning` (an earlier prune's failure) on every rank.
comm::Failure publish(CheckpointDir& dir, const std::string& tmp, const SaveResult& result,
                      const std::string& name, std::uint64_t manifest_hash, const comm::Bound& bound,
                      std::string& warning) {
  comm::Failure failed;
  const bool root = rank_in(dir.comm()) == 0;
  if (root) {
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
      warning = dir.take_pruning_warning();
      dir.start_pruning();
    }
  }
  auto agreed = comm::first_failure(dir.comm(), failed, bound);
  if (!agreed) warning = comm::bcast(warning, 0, dir.comm(), bound);
  return agreed;
}

}  // namespace

template <class T> SaveResult detail::write_snapshot(const Snapshot<T>& snapshot, CheckpointDir& dir) {
  dir.wait_for_pruning();  // the last one, which may remove stale temporaries: never this write's
  const std::string name = checkpoint_file_name(snapshot.step);
  SaveResult result;
  result.path = (fs::path(dir.path()) / name).string();
  const std::string tmp = (fs::path(dir.path()) / temporary_file_name(snapshot.step, dir.run_id())).string();
  const comm::Bound bound{dir.timeout_s(), fmt::format("writing checkpoint {}", name), snapshot.nodes};
  // Never from state the replicas disagree on (the same verdict on every rank: nothing to agree on).
  if (snapshot.corruption) {
    result.message = fmt::format("checkpoint {} not written: {}", name, snapshot.corruption->what);
    result.corruption = snapshot.corruption;
    return result;
  }
  result.message = reason_not_to_save(snapshot, name, bound, dir.comm());
  if (!result.message.empty()) return result;
  result.message = other_runs_checkpoint(name, result.path, dir, bound);
  if (!result.message.empty()) {
    result.skipped = true;
    return result;
  }

  CheckpointWriter writer(dir.comm(), dir.timeout_s(), snapshot.nodes);
  for (const auto& t : snapshot.tensors) writer.add_tensor(t.name, t.shape, t.values);
  const bool root = rank_in(dir.comm()) == 0;
  const std::string created = comm::bcast(root ? utc_now() : std::string(), 0, dir.comm(), bound);
  add_metadata<T>(writer, snapshot.config, snapshot.model_tensors, snapshot.step, dir.run_id(), created,
                  snapshot.state_hash);
  // What the model's token ids mean, so that kpipe-generate decodes them (io/checkpoint_tokenizer.hpp).
  add_tokenizer(writer, *snapshot.tokenizer, snapshot.tokenizer_owner);
  const WriteStatus status = writer.write(tmp);
  if (!status.ok) {
    if (root) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
    }
    result.message = fmt::format("checkpoint {} not written: {}", name, status.message);
    return result;
  }
  if (const auto failed = publish(dir, tmp, result, name, status.manifest_hash, bound, result.warning)) {
    result.message = failed.message;
    return result;
  }
  result.ok = true;
  return result;
}

template <class T, class A>
SaveResult save_checkpoint(runtime::StageModel<T, A>& stage, std::int64_t step, const data::Tokenizer& tokenizer,
                           CheckpointDir& dir) {
  const auto memory = waiting_snapshot_memory(stage);
  return write_snapshot(take_snapshot(stage, step, tokenizer, memory.get(), ExecSpace()), dir);
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template SaveResult save_checkpoint(runtime::StageModel<T, A>&, std::int64_t, const data::Tokenizer&,               \
                                      CheckpointDir&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE
#define KPIPE_INSTANTIATE(T) template SaveResult detail::write_snapshot(const Snapshot<T>&, CheckpointDir&);
KPIPE_TRAINING_ACCUMULATIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io
