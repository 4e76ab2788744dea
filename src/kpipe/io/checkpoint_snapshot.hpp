#pragma once
// What a checkpoint holds, copied out of the stage model at a step boundary into host memory (a snapshot), and
// the snapshot written as a checkpoint. Everything a checkpoint holds is in Snapshot: a field added there and
// written in write_snapshot is in every checkpoint, written while the training waits (save_checkpoint) or
// beside it (io/checkpoint_saver.hpp). Internal to the io part: programs use io/checkpoint.hpp.
#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/runtime/replica_check.hpp"
#include "kpipe/runtime/stage_model.hpp"

namespace kpipe::io::detail {

// One tensor of this rank's share and where its values lie (host memory).
template <class T> struct SnapshotTensor {
  std::string name;  // absolute: "/model/layers/03/attn/qkv/weight"
  std::vector<std::int64_t> shape;
  const T* values = nullptr;
};


template <class T> struct Snapshot {
  std::int64_t step = 0;  // the step boundary: optimizer steps taken, which is also the sampler's position
  Config config;          // the run's (the RNG is keyed by train.seed and the step: nothing else to keep)
  std::int64_t model_tensors = 0;              // of the whole model
  const data::Tokenizer* tokenizer = nullptr;  // the run's, unchanged while it trains
  bool tokenizer_owner = false;                // world rank 0 writes the tokenizer's model
  // This rank's share (replica 0's ranks; the other replicas hold the same): each chunk's newest weights,
  // both optimizer moments and, asynchronous runs, the older weight versions its micro-batches in flight read.
  std::vector<SnapshotTensor<T>> tensors;
  std::size_t elements = 0;  // in all
  bool in_place = false;     // the tensors are the state's own memory (nothing copied)
  // The state itself (weights, moments) as (first, count) ranges, never written non-finite.
  std::vector<std::pair<const T*, std::size_t>> must_be_finite;
  std::shared_ptr<const std::vector<std::string>> nodes;  // of every world rank, for the messages (comm::Bound)
  // The replicas' comparison at the step boundary (runtime/replica_check.hpp): the state hash they agreed on,
  // recorded in the file, or what differs (then nothing is written).
  std::uint64_t state_hash = 0;
  std::optional<runtime::SilentCorruption> corruption;
};

// The host elements the snapshots of this rank's stage need at most (the memory plan's snapshot category,
// memory/plan.cpp, in bytes).
template <class T, class A> std::size_t snapshot_capacity(const runtime::StageModel<T, A>& stage);

// Copies the state at step boundary `step` into `memory` (snapshot_capacity elements, host-accessible) with
// `space` and compares the replicas' states (the verdict is the snapshot's), and waits for both: afterwards the
// training may change the state.
// With memory == nullptr (state_in_host_memory only) the snapshot is the state itself, valid until the training
// changes it: for a write the training waits for. Collective over the world (one bounded allgather: every rank
// calls it at the same step boundary).
template <class T, class A>
Snapshot<T> take_snapshot(runtime::StageModel<T, A>& stage, std::int64_t step, const data::Tokenizer& tokenizer,
                          T* memory, const ExecSpace& space);

// The memory for a snapshot written while the training waits: none (in place) where state_in_host_memory, else
// snapshot_capacity host elements, not zeroed. (Not in the memory plan, which counts the buffer of writes beside
// the training: on a GPU, a synchronous checkpoint takes this much host memory while it is written.)
template <class T, class A> std::unique_ptr<T[]> waiting_snapshot_memory(const runtime::StageModel<T, A>& stage);

// Writes a snapshot as a checkpoint of dir and publishes it (save_checkpoint's whole promise). Collective over
// dir.comm(); calls no Kokkos, so that it can run on a thread of its own while the training runs; its HDF5
// calls hold h5::exclusive().
template <class T> SaveResult write_snapshot(const Snapshot<T>& snapshot, CheckpointDir& dir);

}  // namespace kpipe::io::detail
