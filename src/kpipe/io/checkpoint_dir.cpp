// The run's checkpoint directory: checked, locked, and holding no other run's checkpoints.
#include "kpipe/io/checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "kpipe/comm/agree.hpp"
#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/core/program_name.hpp"
#include "kpipe/io/checkpoint_common.hpp"
#include "kpipe/io/checkpoint_lock.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

using detail::utc_now;

namespace {

// 16 hex digits, unique in practice: the OS's randomness mixed with the time, the host and the pid.
std::string new_run_id() {
  std::random_device device;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::uint64_t mix[] = {std::uint64_t(device()) << 32 | device(),
                               std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count()),
                               std::uint64_t(::getpid())};
  return hash_hex(xxh64(mix, sizeof mix, xxh64(std::string_view(host))));
}
}  // namespace

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
  comm_ = comm::duplicate(world, {timeout_s, "making the checkpoints' communicator"});
}

CheckpointDir::~CheckpointDir() {
  if (const std::string failed = take_pruning_warning(); !failed.empty())
    fmt::print(stderr, "{}: warning: {}\n", program_name(), failed);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void CheckpointDir::start_pruning() {
  wait_for_pruning();  // one at a time
  pruning_ = std::thread([this] {
    try {
      prune_checkpoints(config_.dir, run_id_, config_.keep, locked());
    } catch (const std::exception& e) {
      pruning_warning_ += fmt::format("{}pruning old checkpoints failed: {}", pruning_warning_.empty() ? "" : "; ",
                                      e.what());
    }
  });
}

void CheckpointDir::wait_for_pruning() {
  if (pruning_.joinable()) pruning_.join();
}

std::string CheckpointDir::take_pruning_warning() {
  wait_for_pruning();
  return std::exchange(pruning_warning_, {});
}

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

}  // namespace kpipe::io
