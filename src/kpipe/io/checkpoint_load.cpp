// Loading a checkpoint into a stage model, on any layout.
#include "kpipe/io/checkpoint.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kpipe/core/hash.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/core/program_name.hpp"
#include "kpipe/io/checkpoint_common.hpp"
#include "kpipe/runtime/replica_check.hpp"
#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

using namespace detail;

namespace {

// An asynchronous run resumes only from a checkpoint of the same asynchronous run's layout: the versions in
// flight, and which micro-batch reads which, are those of one schedule, layout and micro-batch count
// (another layout's run would not be the uninterrupted one's continuation). Then the older versions.
template <class T, class A>
OlderVersions<T> read_older_versions(const runtime::StageModel<T, A>& stage, const CheckpointReader& reader) {
  const Config& now = stage.config();
  const Config then = checkpoint_config(reader.path());
  const auto name = [](const Config& c) {
    return fmt::format("{}{}", c.pipeline.schedule,
                       c.pipeline.vertical_sync == 1 && c.pipeline.schedule == ScheduleKind::pipedream ? " --vertical-sync" : "");
  };
  require(is_asynchronous(then.pipeline.schedule) && then.pipeline.schedule_file.empty(),
          "checkpoint.resume = '{}': a checkpoint of a synchronous run (pipeline.schedule = \"{}\"): an asynchronous "
          "run (\"{}\") resumes only from an asynchronous run's checkpoint, which holds the weight versions in flight",
          reader.path(), then.pipeline.schedule, name(now));
  require(name(then) == name(now) && then.pipeline.pipeline_size == now.pipeline.pipeline_size &&
              then.pipeline.data_parallel == now.pipeline.data_parallel &&
              then.train.microbatches == now.train.microbatches,
          "checkpoint.resume = '{}': written by \"{}\" on pipeline.pipeline_size = {}, pipeline.data_parallel = {} with "
          "train.microbatches = {}; an asynchronous run resumes only with the same schedule, layout and micro-batches "
          "(the versions in flight are theirs), not \"{}\", {}, {}, {}",
          reader.path(), name(then), then.pipeline.pipeline_size, then.pipeline.data_parallel, then.train.microbatches,
          name(now), now.pipeline.pipeline_size, now.pipeline.data_parallel, now.train.microbatches);
  OlderVersions<T> older(stage.chunks());
  // A checkpoint of a run's last step holds no older version: its pipeline was drained (a longer run
  // from it starts its asynchronous pipeline anew from the newest weights).
  if (reader.number("step") >= then.train.steps) return older;
  for (int c = 0; c < stage.chunks(); ++c) {
    const auto& store = stage.chunk(c).params();
    for (int j = 1; j <= stage.older_versions(c, 0); ++j) {
      std::vector<T> values;
      if (reader.find(older_version_root(j) + store.slots().front().path())) values.resize(store.size());
      // Absent: no micro-batch in flight read it, as the checkpoint's run was near its end; a run with more
      // steps would forward more of them.
      require(!values.empty() || then.train.steps == now.train.steps,
              "train.steps = {}: checkpoint.resume = '{}' is of step {} of a run of {} steps, near its end, where "
              "the pipeline keeps fewer weight versions; resume it with train.steps = {}",
              now.train.steps, reader.path(), reader.number("step"), then.train.steps, then.train.steps);
      for (const auto& slot : store.slots())
        if (!values.empty())
          reader.read_tensor(older_version_root(j) + slot.path(), slot.spec->shape, values.data() + slot.offset);
      older[c].push_back(std::move(values));
    }
  }
  return older;
}

// The state hash the file recorded (runtime/replica_check.hpp), if it holds one and its tensors are in T (a
// conversion changes the bytes hashed).
template <class T> std::optional<std::uint64_t> recorded_state_hash(const CheckpointReader& reader) {
  if (!reader.has("/", "state_hash") || reader.text("scalar_type") != type_name<T>()) return std::nullopt;
  const std::string text = reader.text("state_hash");
  std::uint64_t hash = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), hash, 16);
  if (error != std::errc() || end != text.data() + text.size() || text.size() != 16)
    throw CorruptCheckpoint(fmt::format("checkpoint '{}': state_hash = '{}' is not 16 hex digits", reader.path(), text));
  return hash;
}

// Every rank hashes the state it loaded: replicas that loaded the same bytes must agree (otherwise a node
// corrupts what it holds), and the model's hash must be the one recorded (otherwise the file was written from
// corrupted memory, or its bytes and checksums were changed together). The same verdict on every rank.
template <class T, class A>
void verify_loaded_state(runtime::StageModel<T, A>& stage, const std::string& path, std::optional<std::uint64_t> recorded) {
  const std::string name = fs::path(path).filename().string();
  const auto verdict = runtime::check_replicas(stage, "after loading " + name);
  if (!verdict.agreed()) throw runtime::ReplicasDisagree(*verdict.corruption);
  if (recorded && *recorded != verdict.state_hash)
    throw CorruptCheckpoint(fmt::format(
        "checkpoint '{}': the state loaded hashes to {}, the file recorded {} (written from corrupted memory, or "
        "changed since): resume from an older checkpoint (checkpoint.resume = FILE)",
        path, hash_hex(verdict.state_hash), hash_hex(*recorded)));
}

// `optimizer`: the moments and an asynchronous run's older versions too (resuming); else the newest weights alone,
// the moments left as they are (checkpoint.init_from: a fresh optimizer).
template <class T, class A>
LoadedCheckpoint<T> load(runtime::StageModel<T, A>& stage, const std::string& path, const Expected* expected,
                         bool optimizer = true) {
  LoadedCheckpoint<T> loaded;
  std::optional<std::uint64_t> recorded;
  const double timeout = stage.config().pipeline.recv_timeout_s;
  collectively(stage.grid().world, timeout, fmt::format("loading checkpoint '{}'", path), [&] {
    const CheckpointReader reader(checkpoint_file_of(path));
    check_identity(reader, expected);
    loaded.path = reader.path();
    loaded.step = reader.number("step");
    loaded.run_id = reader.text("run_id");
    if (optimizer) recorded = recorded_state_hash<T>(reader);  // weights alone do not hash to it
    require(loaded.step >= 0, "checkpoint file '{}': step = {}", reader.path(), loaded.step);
    for (int c = 0; c < stage.chunks(); ++c) {
      auto& store = stage.chunk(c).params();
      // kpipe-import's checkpoints hold weights only: they start a run (init_from), they do not resume one.
      require(!optimizer || reader.find(moment1_root + store.slots().front().path()),
              "checkpoint '{}' holds weights only, no optimizer state (kpipe-import wrote it?): start a run from it "
              "with checkpoint.init_from (--init-from) rather than resume it",
              reader.path());
      // Where the state is host memory the tensors are read into it (no copy, no second copy of the state in
      // memory); else into host staging, then copied. A load that fails leaves the state undefined either way
      // (as one whose state hash differs does): the callers load another checkpoint or end.
      const std::size_t n = std::size_t(store.size());
      std::vector<std::pair<std::unique_ptr<T[]>, const View1<T>*>> staged;
      const auto destination = [&](const View1<T>& state) -> T* {
        if constexpr (state_in_host_memory) return state.data();
        staged.emplace_back(host_buffer_for_overwrite<T>(n), &state);
        return staged.back().first.get();
      };
      T* const values = destination(store.values());
      T* const moment1 = optimizer ? destination(store.moment1()) : nullptr;
      T* const moment2 = optimizer ? destination(store.moment2()) : nullptr;
      for (const auto& slot : store.slots()) {
        const std::string name = slot.path();
        reader.read_tensor(model_root + name, slot.spec->shape, values + slot.offset);
        if (!optimizer) continue;
        reader.read_tensor(moment1_root + name, slot.spec->shape, moment1 + slot.offset);
        reader.read_tensor(moment2_root + name, slot.spec->shape, moment2 + slot.offset);
      }
      for (const auto& [host, state] : staged) copy_to_device(host.get(), *state);
      store.refresh_compute_copy(ExecSpace());  // what the products read (mixed precision)
    }
    if (stage.versioned() && optimizer) loaded.older = read_older_versions(stage, reader);
    // Every tensor of the model was found; a checkpoint with more is of a larger model.
    const std::int64_t tensors = reader.number("tensors");
    require(tensors == model_tensors(stage.desc()),
            "checkpoint '{}': holds {} tensors, the model {} (model.n_layers = {}): not the same model", reader.path(),
            tensors, model_tensors(stage.desc()), stage.desc().config.n_layers);
  });
  verify_loaded_state(stage, loaded.path, recorded);
  return loaded;
}
}  // namespace

template <class T, class A> LoadedCheckpoint<T> load_checkpoint(runtime::StageModel<T, A>& stage, const std::string& path) {
  return load(stage, path, nullptr);
}

template <class T, class A> void load_weights(runtime::StageModel<T, A>& stage, const std::string& path) {
  load(stage, path, nullptr, false);
}

template <class T, class A>
LoadedCheckpoint<T> load_resume_point(runtime::StageModel<T, A>& stage, const ResumePoint& point) {
  if (point.path.empty()) return {};
  const Expected expected{point.run_id, point.manifest_hash, point.step};
  LoadedCheckpoint<T> loaded = load(stage, point.path, &expected);
  if (stage.grid().world_rank == 0)
    fmt::print(stderr, "{}: resumed from checkpoint {} (step {}): going on with step {}\n", program_name(),
               loaded.path, loaded.step, loaded.step + 1);
  return loaded;
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template LoadedCheckpoint<T> load_checkpoint(runtime::StageModel<T, A>&, const std::string&);                       \
  template void load_weights(runtime::StageModel<T, A>&, const std::string&);                                         \
  template LoadedCheckpoint<T> load_resume_point(runtime::StageModel<T, A>&, const ResumePoint&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io
