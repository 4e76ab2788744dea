#include "kpipe/io/checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <random>
#include <thread>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/io/checkpoint_lock.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/version.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

namespace {

// Where a parameter's value and its two optimizer moments live in the file.
constexpr const char* model_root = "/model/";
constexpr const char* moment1_root = "/optimizer/moment1/";
// Asynchronous runs: /weight_versions/<j>/<tensor> is the version j updates before the newest (/model/).
std::string older_version_root(int older) { return fmt::format("/weight_versions/{}/", older); }
constexpr const char* moment2_root = "/optimizer/moment2/";

// Kinds of agreed failure.
enum : int { failed_input = 1, failed_corrupt = 2 };

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// 16 hex digits, unique in practice: the OS's randomness mixed with the time, the host and the pid.
std::string new_run_id() {
  std::random_device device;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::uint64_t h = fnv1a64(host);
  const std::uint64_t mix[] = {std::uint64_t(device()) << 32 | device(),
                               std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count()),
                               std::uint64_t(::getpid())};
  h = fnv1a64(mix, sizeof mix, h);
  return hash_hex(h);
}

// Runs fn on this rank, then every rank learns whether any failed and the message of the lowest failing
// rank; all throw the same error (CorruptCheckpoint or InputError). Doubles as a barrier.
void collectively(MPI_Comm world, double timeout_s, const std::string& what, const std::function<void()>& fn) {
  comm::Failure mine;
  try {
    fn();
  } catch (const CorruptCheckpoint& e) {
    mine = {failed_corrupt, -1, e.what()};
  } catch (const InputError& e) {
    mine = {failed_input, -1, e.what()};
  } catch (const std::exception& e) {  // file-system errors: the checkpoint directory is unusable
    mine = {failed_input, -1, fmt::format("checkpoint: {}", e.what())};
  }
  const comm::Failure agreed = comm::first_failure(world, mine, {timeout_s, what});
  if (agreed.code == failed_corrupt) throw CorruptCheckpoint(agreed.message);
  if (agreed) throw InputError(agreed.message);
}

template <class T> std::vector<T> host_copy(const View1<T>& flat) {
  std::vector<T> host(flat.extent(0));
  Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> target(host.data(), host.size());
  Kokkos::deep_copy(target, flat);
  return host;
}

template <class T> void copy_to_device(const std::vector<T>& host, const View1<T>& flat) {
  Kokkos::View<const T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> source(host.data(), host.size());
  Kokkos::deep_copy(flat, source);
}

// What a loaded checkpoint must be: when `latest` named it, its run's and the file `latest` recorded; once
// chosen to resume from, of the step it was chosen at.
struct Expected {
  std::string run_id;               // "": any
  std::uint64_t manifest_hash = 0;  // 0: any
  std::int64_t step = -1;           // -1: any
};

// The checks every load makes of a file before reading a tensor.
void check_identity(const CheckpointReader& reader, const Expected* expected) {
  const std::int64_t step = reader.number("step");
  const std::string name = fs::path(reader.path()).filename().string();
  const std::int64_t named = step_of_file_name(name);
  if (named >= 0 && named != step)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' holds step {}, not the step {} its name says (a file of "
                                        "another step put in its place?)",
                                        reader.path(), step, named));
  if (!expected) return;
  if (expected->step >= 0 && step != expected->step)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' holds step {}, not the step {} it held when it was chosen "
                                        "to resume from (replaced since)",
                                        reader.path(), step, expected->step));
  const std::string run = reader.text("run_id");
  if (!expected->run_id.empty() && run != expected->run_id)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' belongs to run {}, not to run {} whose `latest` names "
                                        "it (a file of another run put in its place?)",
                                        reader.path(), run, expected->run_id));
  if (expected->manifest_hash != 0 && reader.manifest_hash() != expected->manifest_hash)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' is not the one `latest` recorded (manifest fnv1a64 {}, "
                                        "recorded {}): replaced since it was written",
                                        reader.path(), hash_hex(reader.manifest_hash()),
                                        hash_hex(expected->manifest_hash)));
}

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

template <class T, class A>
LoadedCheckpoint<T> load(runtime::StageModel<T, A>& stage, const std::string& path, const Expected* expected) {
  LoadedCheckpoint<T> loaded;
  const double timeout = stage.config().pipeline.recv_timeout_s;
  collectively(stage.grid().world, timeout, fmt::format("loading checkpoint '{}'", path), [&] {
    const CheckpointReader reader(checkpoint_file_of(path));
    check_identity(reader, expected);
    loaded.path = reader.path();
    loaded.step = reader.number("step");
    loaded.run_id = reader.text("run_id");
    require(loaded.step >= 0, "checkpoint file '{}': step = {}", reader.path(), loaded.step);
    for (int c = 0; c < stage.chunks(); ++c) {
      auto& store = stage.chunk(c).params();
      std::vector<T> values(store.size()), moment1(store.size()), moment2(store.size());
      for (const auto& slot : store.slots()) {
        const std::string name = slot.path();
        reader.read_tensor(model_root + name, slot.spec->shape, values.data() + slot.offset);
        reader.read_tensor(moment1_root + name, slot.spec->shape, moment1.data() + slot.offset);
        reader.read_tensor(moment2_root + name, slot.spec->shape, moment2.data() + slot.offset);
      }
      copy_to_device(values, store.values());
      copy_to_device(moment1, store.moment1());
      copy_to_device(moment2, store.moment2());
      store.refresh_compute_copy(ExecSpace());  // what the products read (mixed precision)
    }
    if (stage.versioned()) loaded.older = read_older_versions(stage, reader);
    // Every tensor of the model was found; a checkpoint with more is of a larger model.
    std::int64_t model_tensors = 0;
    for (const auto& layer : stage.desc().layers) model_tensors += std::int64_t(layer.params.size());
    const std::int64_t tensors = reader.number("tensors");
    require(tensors == model_tensors,
            "checkpoint '{}': holds {} tensors, the model {} (model.n_layers = {}): not the same model", reader.path(),
            tensors, model_tensors, stage.desc().config.n_layers);
  });
  return loaded;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (std::size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    lines.push_back(text.substr(start, end - start));
  return lines;
}

}  // namespace

// ---- public -------------------------------------------------------------------------------------------


void validate_checkpoint_config(const CheckpointConfig& config) {
  require(config.keep >= 2, "checkpoint.keep = {}: expected an integer >= 2", config.keep);
  require(config.every >= 0, "checkpoint.every = {}: expected an integer >= 0", config.every);
  require(config.resume != "latest" || !config.dir.empty(),
          "checkpoint.resume = \"latest\" needs checkpoint.dir (--checkpoint-dir)");
  require(config.every == 0 || !config.dir.empty(), "checkpoint.every = {} needs checkpoint.dir (--checkpoint-dir)",
          config.every);
}

std::string checkpoint_file_of(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    require(!fs::is_regular_file(fs::path(path) / "checkpoint.h5", ec),
            "checkpoint '{}': a checkpoint of format_version 1 (a step-<N> directory of per-rank files, written by an "
            "earlier kpipe), which this kpipe does not read: it reads format_version {} (one step-<N>.h5 file), "
            "whose metadata carries a checksum",
            path, checkpoint_format_version);
    const Latest latest = read_latest(path);
    if (latest.found) {
      const std::string file = (fs::path(path) / latest.name).string();
      require(fs::is_regular_file(file, ec), "checkpoint '{}': `latest` names {}, which is not there", path,
              latest.name);
      return file;
    }
    const auto files = checkpoint_files(path);
    if (!files.empty()) return files.back().path;
    const auto old = old_format_checkpoints(path);
    require(old.empty(),
            "checkpoint '{}': holds only checkpoints of format_version 1 ({} ...), which this kpipe does not read "
            "(it reads format_version {})",
            path, fs::path(old.empty() ? "" : old.front().path).filename().string(), checkpoint_format_version);
    throw InputError(fmt::format("checkpoint '{}': no complete checkpoint there", path));
  }
  const std::string name = fs::path(path).filename().string();
  require(name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") != 0,
          "checkpoint '{}': an incomplete checkpoint (still being written, or its writer was killed)", path);
  if (!fs::exists(path, ec) && fs::is_regular_file(path + ".h5", ec)) return path + ".h5";  // "ck/step-00000004"
  require(fs::exists(path, ec), "checkpoint '{}': no such file or directory", path);
  // A FIFO, a device or a file this process cannot read is bad input, not a damaged checkpoint.
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("checkpoint '{}': cannot open ({})", path, reason));
  return path;
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const CheckpointReader reader(checkpoint_file_of(path));
  CheckpointInfo info;
  info.path = reader.path();
  info.step = reader.number("step");
  info.format_version = checkpoint_format_version;
  info.run_id = reader.text("run_id");
  info.kpipe_version = reader.text("kpipe_version");
  info.created = reader.text("created");
  info.config_toml = reader.text("config");
  info.schedule = reader.text("schedule");
  info.scalar_type = reader.text("scalar_type");
  if (reader.has("/", "precision")) info.precision = reader.text("precision");
  info.pipeline_size = int(reader.number("pipeline_size"));
  info.data_parallel = int(reader.number("data_parallel"));
  info.chunks = int(reader.number("chunks"));
  info.tensors = reader.number("tensors");
  info.manifest_hash = reader.manifest_hash();
  return info;
}

Config checkpoint_config(const std::string& path) {
  const CheckpointInfo info = read_checkpoint_info(path);
  try {
    return parse_config(info.config_toml, "config", Config{});
  } catch (const InputError& e) {
    throw InputError(fmt::format("checkpoint '{}': config attribute: {}", path, e.what()));
  }
}

// ---- the directory ------------------------------------------------------------------------------------

CheckpointDir::CheckpointDir(const CheckpointConfig& config, MPI_Comm world, double timeout_s)
    : config_(config), world_(world), timeout_s_(timeout_s) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  comm::agree(world, {timeout_s, "checking checkpoint.dir"}, [&] {
    if (rank != 0) return;
    const std::string& dir = config.dir;
    require(!dir.empty(), "checkpoint.dir is empty");
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
      fs::path parent = fs::path(dir).parent_path();
      if (parent.empty()) parent = ".";
      require(fs::is_directory(parent, ec), "checkpoint.dir = '{}': its parent directory '{}' does not exist", dir,
              parent.string());
      require(::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST, "checkpoint.dir = '{}': cannot create ({})", dir,
              std::strerror(errno));
    }
    require(fs::is_directory(dir, ec), "checkpoint.dir = '{}': not a directory", dir);
    // Write access, tried rather than asked (access() says yes to root on a read-only mount).
    const std::string probe = (fs::path(dir) / fmt::format(".kpipe-probe-{}", ::getpid())).string();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    require(fd >= 0, "checkpoint.dir = '{}': cannot write there ({})", dir, std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    lock_ = std::make_unique<DirectoryLock>(dir, fmt::format("pid {} on host {}, since {}", ::getpid(), host, utc_now()));
  });
}

CheckpointDir::~CheckpointDir() = default;

bool CheckpointDir::locked() const { return lock_ && lock_->held(); }

std::string CheckpointDir::warning() const { return lock_ ? lock_->warning() : std::string(); }

void CheckpointDir::start_run(const std::string& run_id) {
  int rank = 0;
  MPI_Comm_rank(world_, &rank);
  std::string id = run_id;
  comm::agree(world_, {timeout_s_, "checking the runs in checkpoint.dir"}, [&] {
    if (rank != 0) return;
    if (id.empty()) id = new_run_id();
    std::vector<std::string> others;
    std::string other_run;
    for (const auto& c : checkpoint_files(config_.dir))
      if (!c.run_id.empty() && c.run_id != id) {
        others.push_back(fs::path(c.path).filename().string());
        other_run = c.run_id;
      }
    const auto old = old_format_checkpoints(config_.dir);
    if (config_.other_runs == OtherRuns::refuse && (!others.empty() || !old.empty())) {
      std::string held;
      if (!others.empty())
        held = fmt::format("{} checkpoint{} of another run (run {}: {}{})", others.size(), others.size() > 1 ? "s" : "",
                           other_run, others.front(), others.size() > 1 ? " to " + others.back() : "");
      if (!old.empty())
        held += fmt::format("{}{} checkpoint{} of format_version 1 ({})", held.empty() ? "" : " and ", old.size(),
                            old.size() > 1 ? "s" : "", fs::path(old.front().path).filename().string());
      throw InputError(fmt::format("checkpoint.dir = '{}' holds {}: continue that run with --resume, choose another "
                                   "--checkpoint-dir, or set checkpoint.other_runs = \"keep\" to write beside them "
                                   "(they are never pruned or replaced)",
                                   config_.dir, held));
    }
    if (lock_) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      lock_->describe(fmt::format("pid {} on host {}, run {}, since {}", ::getpid(), host, id, utc_now()));
    }
  });
  run_id_ = comm::bcast(id, 0, world_, {timeout_s_, "sharing the run's id"});
}

// ---- saving -------------------------------------------------------------------------------------------

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

// The metadata: the same on every rank (rank 0's clock), all of it in the checksummed manifest.
template <class T>
void add_metadata(CheckpointWriter& writer, const Config& config, const model::ModelDesc& desc, std::int64_t step,
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
  const comm::Bound bound{dir.timeout_s(), fmt::format("writing checkpoint {}", name)};
  result.message = reason_not_to_save(stage, name, result.path, dir, bound);
  if (!result.message.empty()) return result;

  CheckpointWriter writer(grid.world, dir.timeout_s());
  std::vector<std::vector<T>> buffers;  // the host copies, alive until written
  add_tensors(writer, stage, step, buffers);
  const std::string created = comm::bcast(grid.world_rank == 0 ? utc_now() : std::string(), 0, grid.world, bound);
  add_metadata<T>(writer, stage.config(), stage.desc(), step, dir.run_id(), created);
  // What the model's token ids mean, so that kpipe-generate decodes them (io/checkpoint_tokenizer.hpp).
  add_tokenizer(writer, tokenizer, grid.world_rank == 0);
  const CheckpointDir::Pause hook = dir.pause();
  if (hook.step == step && hook.seconds > 0)
    writer.on_half_written([&] {
      std::fprintf(stderr, "kpipe: test hook: pausing %g s in the middle of writing %s\n", hook.seconds, tmp.c_str());
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::duration<double>(hook.seconds));
    });

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

// ---- loading ------------------------------------------------------------------------------------------

template <class T, class A> LoadedCheckpoint<T> load_checkpoint(runtime::StageModel<T, A>& stage, const std::string& path) {
  return load(stage, path, nullptr);
}

namespace {

// The checkpoints checkpoint.resume may resume from, newest first, the same on every rank: rank 0 picks them
// (the file `latest` names, then that run's older checkpoints) and shares them, with what they must be.
struct Candidates {
  std::vector<std::string> paths;
  Expected expected;  // the run `latest` names and the manifest it recorded
};

Candidates resume_candidates(const CheckpointConfig& config, MPI_Comm world, double timeout) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::string candidates;
  Expected expected;
  collectively(world, timeout, "choosing the checkpoint to resume from", [&] {
    if (rank != 0) return;
    if (config.resume != "latest") {
      candidates = config.resume + "\n";
      return;
    }
    const Latest latest = read_latest(config.dir);
    const auto files = checkpoint_files(config.dir);
    if (!latest.found) {
      if (files.empty()) {
        const auto old = old_format_checkpoints(config.dir);
        require(old.empty(),
                "checkpoint.dir = '{}' holds only checkpoints of format_version 1 ({} ...), which this kpipe does not "
                "read (it reads format_version {}): resume one with the kpipe that wrote it",
                config.dir, fs::path(old.empty() ? "" : old.front().path).filename().string(),
                checkpoint_format_version);
        return;  // nothing yet: start fresh
      }
      for (const auto& c : files)
        require(c.run_id == files.back().run_id,
                "checkpoint.dir = '{}' has no `latest` and holds checkpoints of several runs: give the one to resume "
                "as checkpoint.resume = <file>",
                config.dir);
      expected.run_id = files.back().run_id;
    } else {
      expected.run_id = latest.run_id;
      expected.manifest_hash = latest.manifest_hash;
      candidates += (fs::path(config.dir) / latest.name).string() + "\n";
    }
    // Then the same run's older checkpoints, newest first (without `latest`: all of them).
    const std::int64_t newest = latest.found ? step_of_file_name(latest.name) : INT64_MAX;
    for (auto it = files.rbegin(); it != files.rend(); ++it)
      if (it->step < newest && it->run_id == expected.run_id) candidates += it->path + "\n";
  });
  Candidates out;
  out.paths = split_lines(comm::bcast(candidates, 0, world, {timeout, "sharing the checkpoints to resume from"}));
  out.expected.run_id = comm::bcast(expected.run_id, 0, world, {timeout, "sharing the run to resume"});
  out.expected.manifest_hash = expected.manifest_hash;
  comm::bcast(&out.expected.manifest_hash, 1, MPI_UINT64_T, 0, world, {timeout, "sharing the run to resume"});
  return out;
}

// A candidate as every rank finds it: its metadata and identity checked (what a load checks before reading a
// tensor) and, with `all_bytes`, every dataset's bytes against the manifest, each rank a share, so that damage
// anywhere in it is found before the run is planned from its step.
ResumePoint checked_candidate(const std::string& path, const Expected& expected, bool all_bytes, MPI_Comm world,
                              double timeout) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &ranks);
  ResumePoint point;
  collectively(world, timeout, fmt::format("checking checkpoint '{}'", path), [&] {
    const CheckpointReader reader(checkpoint_file_of(path));
    check_identity(reader, &expected);
    point.path = reader.path();
    point.step = reader.number("step");
    require(point.step >= 0, "checkpoint file '{}': step = {}", reader.path(), point.step);
    if (all_bytes)
      for (std::size_t i = std::size_t(rank); i < reader.datasets().size(); i += std::size_t(ranks))
        reader.read_verified(reader.datasets()[i]);
  });
  point.run_id = expected.run_id;
  point.manifest_hash = expected.manifest_hash;
  return point;
}

}  // namespace

ResumePoint choose_resume_point(const CheckpointConfig& config, MPI_Comm world, double timeout_s) {
  if (config.resume.empty()) return {};
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  const bool speak = rank == 0;
  const Candidates candidates = resume_candidates(config, world, timeout_s);
  const auto& list = candidates.paths;
  if (list.empty()) {
    if (speak) std::fprintf(stderr, "kpipe: no checkpoint in '%s' yet: starting from step 0\n", config.dir.c_str());
    return {};
  }
  const bool from_latest = config.resume == "latest";
  const bool may_fall_back = config.fallback == CheckpointFallback::previous;
  for (std::size_t i = 0; i < list.size(); ++i) {
    try {
      // The first candidate must be exactly what `latest` recorded; older ones of the same run.
      Expected want = from_latest ? candidates.expected : Expected{};
      if (i > 0) want.manifest_hash = 0;
      return checked_candidate(list[i], want, may_fall_back && i + 1 < list.size(), world, timeout_s);
    } catch (const CorruptCheckpoint& e) {
      if (!may_fall_back || i + 1 == list.size()) throw;
      if (speak)
        std::fprintf(stderr, "kpipe: %s; falling back to the previous complete checkpoint %s\n", e.what(),
                     list[i + 1].c_str());
    }
  }
  return {};
}

template <class T, class A>
LoadedCheckpoint<T> load_resume_point(runtime::StageModel<T, A>& stage, const ResumePoint& point) {
  if (point.path.empty()) return {};
  const Expected expected{point.run_id, point.manifest_hash, point.step};
  LoadedCheckpoint<T> loaded = load(stage, point.path, &expected);
  if (stage.grid().world_rank == 0)
    std::fprintf(stderr, "kpipe: resumed from checkpoint %s (step %lld)\n", loaded.path.c_str(),
                 static_cast<long long>(loaded.step));
  return loaded;
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template SaveResult save_checkpoint(runtime::StageModel<T, A>&, std::int64_t, const data::Tokenizer&,               \
                                      CheckpointDir&);                                                                \
  template LoadedCheckpoint<T> load_checkpoint(runtime::StageModel<T, A>&, const std::string&);                       \
  template LoadedCheckpoint<T> load_resume_point(runtime::StageModel<T, A>&, const ResumePoint&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io
