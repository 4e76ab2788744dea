#pragma once
// Checkpoints: the whole training state in HDF5, written atomically, loaded by tensor name on any layout.
// Layout and reasons: docs/checkpoint-format.md. In short, step-<N>/checkpoint.h5 is the entry file
// (metadata, config, and one HDF5 external link per tensor, e.g. /model/layers/07/attn/qkv/weight), and
// each pipeline rank of replica 0 writes its own tensors to step-<N>/rank-<r>.h5. Every tensor carries an
// FNV-1a checksum attribute and is stored with the Fletcher32 filter; both are verified on load.
//
// Every function taking a Trainer is collective over its world communicator. Failures are agreed on
// before anyone returns: every rank throws the same InputError (the first failing rank's message), so
// no rank waits for another that has given up.
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/io/checkpoint_store.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace kpipe::io {

inline constexpr const char* checkpoint_format = "kpipe-checkpoint";
inline constexpr int checkpoint_format_version = 1;

// The checkpoint's bytes are damaged or missing (unreadable file, failed checksum): with
// checkpoint.fallback = "previous" the one before is tried. Other InputErrors (a model that does not
// match the checkpoint) are final.
struct CorruptCheckpoint : InputError {
  using InputError::InputError;
};

// What the entry file says about itself (read on one process, no MPI).
struct CheckpointInfo {
  std::int64_t step = 0;  // optimizer steps taken = the next step to run
  int format_version = 0;
  std::string kpipe_version, created, config_toml, schedule;
  int pipeline_size = 0, data_parallel = 0, chunks = 0;
  std::int64_t tensors = 0;
};

// Checks the [checkpoint] keys: keep >= 2, every >= 0, resume "latest" needs dir.
void validate_checkpoint_config(const CheckpointConfig& config);

// Writes the trainer's state as dir/step-<next_step>/ (through step-<N>.tmp, fsync and rename), points
// `latest` at it and keeps the newest `keep`. Returns the directory written.
template <class T> std::string save_checkpoint(runtime::Trainer<T>& trainer, const std::string& dir, int keep);

// Loads a checkpoint (a step-<N> directory or its entry file) into the trainer and sets its next step.
// Throws CorruptCheckpoint or InputError on every rank alike.
template <class T> void load_checkpoint(runtime::Trainer<T>& trainer, const std::string& path);

// Applies checkpoint.resume: "" does nothing; "latest" loads the checkpoint `latest` names in
// checkpoint.dir (none there: starts fresh); anything else is a checkpoint directory. With fallback =
// "previous", a corrupt one gives way to the next older complete one. Progress lines go to stderr on
// world rank 0. Returns the directory loaded, or "".
template <class T> std::string resume_training(runtime::Trainer<T>& trainer, const CheckpointConfig& config);

// A step-<N> directory, its entry file, or a checkpoint.dir (its latest) -> the entry file's path.
// InputError when there is no complete checkpoint there.
std::string entry_file_of(const std::string& path);

CheckpointInfo read_checkpoint_info(const std::string& path);

// The configuration the checkpoint was written with (its config attribute, parsed).
Config checkpoint_config(const std::string& path);

// Test hook KPIPE_TEST_PAUSE_IN_CHECKPOINT="<step>:<seconds>": writing the checkpoint of that step pauses
// halfway through each rank's file (the job can then be killed mid-write).
struct PauseHook {
  std::int64_t step = -1;
  double seconds = 0;
};
PauseHook pause_hook_from_environment();

}  // namespace kpipe::io
