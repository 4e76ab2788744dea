#pragma once
// Checkpoints of a training: a stage model's whole state as one checkpoint file (io/checkpoint_file.hpp),
// step-<N>.h5 in the run's checkpoint directory (io/checkpoint_store.hpp), loaded by tensor name on any
// layout. Layout and reasons: docs/checkpoint-format.md.
//
// Every function taking a StageModel or a CheckpointDir is collective over the stage's world communicator (a
// write: over the directory's own, CheckpointDir::comm()), with every wait bounded by pipeline.recv_timeout_s. Failures are agreed on before anyone
// returns: every rank throws the same InputError (the lowest failing rank's message) or returns the same
// SaveResult, so no rank waits for another that has given up.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/io/checkpoint_store.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/runtime/replica_check.hpp"
#include "kpipe/runtime/stage_model.hpp"

namespace kpipe::io {

class DirectoryLock;

// What a checkpoint file says about itself, verified against its manifest (one process, no MPI).
struct CheckpointInfo {
  std::string path;
  std::int64_t step = 0;  // optimizer steps taken = the next step to run
  int format_version = 0;
  std::string run_id, kpipe_version, created, config_toml, schedule, scalar_type;
  std::string precision = "fp32";  // train.precision of the run that wrote it (older checkpoints: fp32)
  int pipeline_size = 0, data_parallel = 0, chunks = 0;
  std::int64_t tensors = 0;  // model tensors (each with two optimizer moments)
  std::uint64_t manifest_hash = 0;
  std::string state_hash;  // what the replicas agreed on (16 hex digits; "" in files older than the record)
};

// Checks the [checkpoint] keys: keep >= 2, every >= 0, the enumerations, resume "latest" needs dir.
void validate_checkpoint_config(const CheckpointConfig& config);

// A checkpoint file, or a checkpoint.dir (the checkpoint its `latest` names) -> the checkpoint file.
// InputError when there is none, and for a checkpoint of format_version 1 (a step-<N> directory), naming it.
std::string checkpoint_file_of(const std::string& path);

CheckpointInfo read_checkpoint_info(const std::string& path);

// The configuration the checkpoint was written with (its config attribute, parsed).
Config checkpoint_config(const std::string& path);

// The run's checkpoint directory, from before the first step to the end of the run.
class CheckpointDir {
 public:
  // Collective over world, before any training: creates checkpoint.dir when its parent exists, checks that
  // it is a directory this process can write, and takes its lock (world rank 0). InputError on every rank.
  CheckpointDir(const CheckpointConfig& config, MPI_Comm world, double timeout_s);
  ~CheckpointDir();
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;

  // Collective: the run's identity is the checkpoint's it resumed from (run_id), or a new one (""). The
  // directory must hold no other run's checkpoints, unless checkpoint.other_runs = "keep" (then they
  // are left alone: never pruned, never replaced). InputError on every rank.
  void start_run(const std::string& run_id);

  const std::string& path() const { return config_.dir; }
  const CheckpointConfig& config() const { return config_; }
  const std::string& run_id() const { return run_id_; }
  MPI_Comm world() const { return world_; }
  // The checkpoints' own communicator over world's ranks: a write's collectives run there, so that a write
  // beside the training (io/checkpoint_saver.hpp) never meets the training's collectives.
  MPI_Comm comm() const { return comm_; }
  double timeout_s() const { return timeout_s_; }
  bool locked() const;
  // A line for the log (world rank 0): the file system could not lock the directory ("" otherwise).
  std::string warning() const;

  // Pruning (checkpoint.keep) runs beside whatever follows, on world rank 0: removing a large file takes the
  // file system long (a 1 GB checkpoint's: 0.4 s here), and nothing needs it done but the next write, which
  // starts by waiting for it (it removes stale temporaries too, so never one being written), and the
  // directory's end. start_pruning: world rank 0, once `latest` names the newest. take_pruning_warning: waits
  // for it; what failed in the prunes since the last call, or "" (a failed prune is a warning, never an error).
  void start_pruning();
  void wait_for_pruning();
  std::string take_pruning_warning();

 private:
  CheckpointConfig config_;
  MPI_Comm world_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  double timeout_s_;
  std::string run_id_;
  std::unique_ptr<DirectoryLock> lock_;  // world rank 0 only
  std::thread pruning_;
  std::string pruning_warning_;  // the pruning thread's, read once it is joined
};

// The outcome of a save, the same on every rank.
struct SaveResult {
  bool ok = false;
  // Not ok, and not a failure: another run's checkpoint of this step is where this one would go, and is kept
  // (checkpoint.other_runs = "keep"); `message` says so.
  bool skipped = false;
  std::string path;     // the checkpoint file (published when ok)
  std::string message;  // why not (which rank, which file, the errno text)
  std::string warning;  // ok, but an earlier checkpoint's pruning (which runs beside) failed
  std::optional<runtime::SilentCorruption> corruption;  // not written: the replicas' states differ
};

// Writes the stage model's state at step boundary `step` (the optimizer steps taken) as step-<step>.h5 in dir,
// with the run's tokenizer (an asynchronous run's older weight versions in flight too, /weight_versions/<j>/...):
// copied to host memory (io/checkpoint_snapshot.hpp), written as a temporary file by every rank
// (io/checkpoint_file.hpp), published by a rename only once every rank's bytes are on storage, then
// `latest` is updated and this run's checkpoints beyond checkpoint.keep are removed, oldest first. A
// failure anywhere (disk full, I/O error, non-finite state, replicas whose states differ: runtime/replica_check.hpp)
// publishes nothing: `latest` and every older checkpoint stay as they were. The file records the state hash the
// replicas agreed on. The training waits; io/checkpoint_saver.hpp writes the same beside it.
template <class T, class A>
SaveResult save_checkpoint(runtime::StageModel<T, A>& stage, std::int64_t step, const data::Tokenizer& tokenizer,
                           CheckpointDir& dir);

// The older weight versions an asynchronous run's checkpoint holds for this rank's chunks: [chunk][j - 1] is
// the version j updates before the newest (an empty one: no micro-batch in flight read it; no versions at all
// for a chunk: a drained run's checkpoint, whose newest weights stand for them).
template <class T> using OlderVersions = std::vector<std::vector<std::vector<T>>>;

template <class T> struct LoadedCheckpoint {
  std::string path;  // the checkpoint file ("": nothing loaded)
  std::int64_t step = 0;
  std::string run_id;
  OlderVersions<T> older;  // a versioned stage's (asynchronous run); empty otherwise
};

// Loads a checkpoint (a file, or a checkpoint.dir's latest) into the stage model's chunks: the newest weights
// and the optimizer state, on any layout; for a versioned stage (asynchronous run) also the older weight
// versions in flight (same schedule, pipeline size and micro-batches only: InputError otherwise). The trainer
// resumes from what it returns (Trainer::resume). Then the state loaded is hashed on every rank and compared with
// the hash the file recorded (none in files older than the record: nothing compared). Throws CorruptCheckpoint
// (loaded state and record differ: written from corrupted memory, or damaged since) or InputError on every rank
// alike, and runtime::ReplicasDisagree where replicas that loaded the same bytes hold different states.
template <class T, class A> LoadedCheckpoint<T> load_checkpoint(runtime::StageModel<T, A>& stage, const std::string& path);

// checkpoint.init_from: the newest weights of a checkpoint (any layout's, or kpipe-import's) into the stage model's
// chunks, on any layout; the optimizer state is left as it is (a fresh run's). InputError on every rank alike.
template <class T, class A> void load_weights(runtime::StageModel<T, A>& stage, const std::string& path);

// The checkpoint a run resumes from, chosen before the run is planned: its step is the run's first, where an
// asynchronous run's lists start (runtime::TrainerOptions::first_step).
struct ResumePoint {
  std::string path;       // the checkpoint file ("": none, the run starts from step 0)
  std::int64_t step = 0;  // its step
  // What the file must still be when it is loaded: of the run `latest` named ("": any) and, for the file
  // `latest` names, the manifest it recorded (0: any).
  std::string run_id;
  std::uint64_t manifest_hash = 0;
};

// Collective over world, bounded by timeout_s: applies checkpoint.resume. "" chooses nothing; "latest" the
// checkpoint `latest` names in checkpoint.dir (none there: start fresh), which must be the file `latest`
// recorded; anything else is a checkpoint file. Reads each candidate's metadata on every rank; with fallback =
// "previous" a corrupt one gives way to the same run's next older one, and so that the choice is final before
// the run is planned, a candidate with an older one behind it has every dataset's bytes verified too (each rank
// a share). Progress lines go to stderr on world rank 0. Throws CorruptCheckpoint or InputError on every rank
// alike.
ResumePoint choose_resume_point(const CheckpointConfig& config, MPI_Comm world, double timeout_s);

// Loads the chosen checkpoint into the stage model (load_checkpoint; nothing when point.path is ""), the file
// as it was chosen (CorruptCheckpoint on every rank otherwise), and says so on world rank 0. The trainer, built
// with first_step = point.step, resumes from what it returns (Trainer::resume).
template <class T, class A>
LoadedCheckpoint<T> load_resume_point(runtime::StageModel<T, A>& stage, const ResumePoint& point);



}  // namespace kpipe::io
