// Choosing the checkpoint a run resumes from, before the run is planned.
#include "kpipe/io/checkpoint.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/program_name.hpp"
#include "kpipe/io/checkpoint_common.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

using namespace detail;

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (std::size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    lines.push_back(text.substr(start, end - start));
  return lines;
}

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
    if (speak) fmt::print(stderr, "{}: no checkpoint in '{}' yet: starting from step 1\n", program_name(), config.dir);
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
        fmt::print(stderr, "{}: {}; falling back to the previous complete checkpoint {}\n", program_name(), e.what(),
                   list[i + 1]);
    }
  }
  return {};
}

}  // namespace kpipe::io
