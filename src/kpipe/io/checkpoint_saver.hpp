#pragma once
// Checkpoints written beside the training (checkpoint.async, docs/checkpoint-format.md). At a checkpoint step
// each rank copies what the checkpoint holds into its snapshot buffer (io/checkpoint_snapshot.hpp: host memory,
// pinned where the model lives on a GPU, copied on an execution space instance of its own; memory category
// `snapshot`, allocated once, before the first step) and goes on training while a thread of its own writes the
// snapshot exactly as a synchronous save does: every rank's part durable first, then published, `latest`
// moved, the run's older checkpoints pruned. At most one write is in flight.
//
// The write's collectives run on the checkpoint directory's own communicator (CheckpointDir::comm()) from
// that thread while the training's run on theirs, which needs MPI_THREAD_MULTIPLE; its HDF5 calls take turns
// with the training's (h5::exclusive()); it calls no Kokkos. Every wait in it is bounded as the training's, and
// its outcome is agreed by every rank (the same SaveResult everywhere). The training learns that every rank's
// write has ended from a step's report (runtime::TrainerOptions::checkpoint_writing), so that every rank takes
// the outcome at the same step boundary.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_snapshot.hpp"
#include "kpipe/io/timeline.hpp"

namespace kpipe::io {

// checkpoint.async where it cannot run: off without checkpoint.dir; where the MPI library does not provide
// MPI_THREAD_MULTIPLE, "on" is an InputError naming the key and value and "auto" becomes "off" (the returned
// line says why; "" otherwise). The same on every rank. (memory::enforce_limit settles "auto" against the
// memory limit.)
std::string settle_async_checkpoints(CheckpointConfig& config);

template <class T, class A> class CheckpointSaver {
 public:
  // Beside the training where the stage's configuration has checkpoint.async on or auto (settled by then) and
  // checkpoint.dir, which allocates the snapshot buffer here; synchronous otherwise. The stage, the tokenizer
  // and the directory must outlive the saver.
  CheckpointSaver(runtime::StageModel<T, A>& stage, const data::Tokenizer& tokenizer, CheckpointDir& dir);
  ~CheckpointSaver();  // waits for a write still in flight (call finish() first to learn its outcome)
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  bool background() const { return background_; }
  // Collective: writes the checkpoint of step boundary `step` while the training waits (from the snapshot
  // buffer, where there is one). Nothing may be in flight.
  SaveResult write(std::int64_t step);
  // Collective, background() only, nothing in flight: copies the snapshot and starts its write.
  void start(std::int64_t step);
  bool in_flight() const { return thread_.joinable(); }  // a write started and its outcome not taken
  std::int64_t in_flight_step() const { return in_flight_step_; }
  // This rank's part of the write in flight has not ended yet (what the rank reports with each step).
  bool writing() const { return in_flight() && !ended_.load(std::memory_order_acquire); }
  // Collective: waits for the write in flight and returns its outcome, the same on every rank.
  SaveResult finish();
  // The seconds finish() last waited for the write (0: it had ended), and the write's own seconds.
  double waited_seconds() const { return waited_seconds_; }
  double write_seconds() const { return write_end_ - write_start_; }
  // This rank's checkpoint work since the last call, for the timeline.
  std::vector<CheckpointSpan> take_spans() { return std::exchange(spans_, {}); }

 private:
  detail::Snapshot<T> snapshot(std::int64_t step, T* memory);
  void run_write();  // the writer thread

  runtime::StageModel<T, A>* stage_;
  const data::Tokenizer* tokenizer_;
  CheckpointDir* dir_;
  bool background_ = false;
  Kokkos::View<T*, PinnedSpace> buffer_;  // the snapshot buffer (background only)
  ExecSpace copy_space_;                  // the snapshot's copies, apart from the training's queue
  detail::Snapshot<T> in_flight_;
  std::int64_t in_flight_step_ = -1;
  std::thread thread_;
  std::atomic<bool> ended_{false};
  SaveResult result_;
  double write_start_ = 0, write_end_ = 0, waited_seconds_ = 0;
  std::vector<CheckpointSpan> spans_;
};

}  // namespace kpipe::io
