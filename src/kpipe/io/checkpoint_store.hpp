#pragma once
// The checkpoint directory (checkpoint.dir), as files (docs/checkpoint-format.md):
//   step-<N>.h5                  complete checkpoints (N zero-padded to 8 digits)
//   step-<N>.h5.<run>.tmp        a checkpoint being written by run <run> (or whose writer was killed)
//   latest                       names the newest complete checkpoint of the run that wrote it last
//   lock                         held by the training writing here (io/checkpoint_lock.hpp)
// Only step-<digits>.h5 files count as checkpoints: a .tmp file is never loaded. Everything here runs on
// one process (world rank 0 when writing); no MPI.
#include <cstdint>
#include <string>
#include <vector>

namespace kpipe::io {

inline constexpr const char* latest_file = "latest";

struct CheckpointRef {
  std::int64_t step = 0;
  std::string path;    // the step-<N>.h5 file (or, format 1, the step-<N> directory)
  std::string run_id;  // from the file's run_id attribute; "" when unreadable
};

std::string checkpoint_file_name(std::int64_t step);                             // "step-00000012.h5"
std::string temporary_file_name(std::int64_t step, const std::string& run_id);  // "step-00000012.h5.<run>.tmp"
// The step a file name says (step-<digits>.h5), or -1.
std::int64_t step_of_file_name(const std::string& name);

// Complete checkpoints under dir, oldest (lowest step) first, each with its run (empty when dir is absent).
std::vector<CheckpointRef> checkpoint_files(const std::string& dir);
// Checkpoints of format_version 1 (step-<digits>/ directories holding checkpoint.h5).
std::vector<CheckpointRef> old_format_checkpoints(const std::string& dir);

// The run_id attribute of a checkpoint file, read without verifying the file ("" when unreadable).
std::string run_of(const std::string& checkpoint_file);

// `latest`: the checkpoint's file name, the run that wrote it, and its manifest's hash, one per line
// (the first line alone is what a script needs).
struct Latest {
  std::string name;
  std::string run_id;
  std::uint64_t manifest_hash = 0;
  bool found = false;
};
Latest read_latest(const std::string& dir);
// Written atomically: a temporary beside it, fsynced, renamed over it, the directory fsynced.
void write_latest(const std::string& dir, const Latest& latest);

// Renames a finished temporary file to its final name (replacing one of the same name) and fsyncs the
// directory, so that the checkpoint appears complete or not at all.
void publish_file(const std::string& tmp, const std::string& final_path);

// Removes this run's complete checkpoints but the newest `keep`, oldest first, never another run's; and
// stale temporary files: this run's, or every one when the caller holds the directory's lock (then no
// other writer can be at work). Returns the files removed.
std::vector<std::string> prune_checkpoints(const std::string& dir, const std::string& run_id, int keep,
                                           bool locked);

}  // namespace kpipe::io
