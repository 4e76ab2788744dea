#pragma once
// The checkpoint directory (checkpoint.dir): complete checkpoints step-<N>/, a checkpoint being written
// step-<N>.tmp/, and `latest`, a one-line text file naming the newest complete one. Only directories
// named step-<digits> that hold the entry file count as complete: a .tmp directory is never loaded.
// Everything here is file-system work on one process (rank 0 when writing); no MPI, no HDF5.
#include <cstdint>
#include <string>
#include <vector>

namespace kpipe::io {

inline constexpr const char* checkpoint_entry_file = "checkpoint.h5";
inline constexpr const char* latest_file = "latest";

struct CheckpointRef {
  std::int64_t step = 0;
  std::string path;  // the step-<N> directory
};

std::string step_dir_name(std::int64_t step);  // "step-00000012"

// Complete checkpoints under dir, oldest first (empty when dir does not exist).
std::vector<CheckpointRef> complete_checkpoints(const std::string& dir);

// The checkpoint `latest` names when it is complete, else the newest complete one; path empty when none.
CheckpointRef latest_checkpoint(const std::string& dir);

// Writes `latest` = name atomically (a temporary beside it, fsynced, renamed, directory fsynced).
void write_latest(const std::string& dir, const std::string& name);

// Removes all but the newest `keep` complete checkpoints, and stale step-*.tmp directories.
void prune_checkpoints(const std::string& dir, int keep);

// Flushes a file's (or a directory's) contents to stable storage; throws std::system_error on failure.
void fsync_path(const std::string& path);

// Renames a finished temporary directory to its final name (replacing a stale one of the same step) and
// fsyncs the parent, so that the checkpoint appears complete or not at all.
void publish_directory(const std::string& tmp, const std::string& final_path);

}  // namespace kpipe::io
