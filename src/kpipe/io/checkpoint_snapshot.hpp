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

// One tensor of this rank's share and where its values lie in the snapshot's memory.
struct SnapshotTensor {
  std::string name;  // absolute: "/model/layers/03/attn/qkv/weight"
  std::vector<std::int64_t> shape;
  std::size_t offset = 0;  // elements into Snapshot::values
};

template <class T> struct Snapshot {
  std::int64_t step = 0;  // the step boundary: optimizer steps taken, which is also the sampler's position
  Config config;          // the run's (the RNG is keyed by train.seed and the step: nothing else to keep)
  std::int64_t model_tensors = 0;              // of the whole model
  const data::Tokenizer* tokenizer = nullptr;  // the run's, unchanged while it trains
  bool tokenizer_owner = false;                // world rank 0 writes the tokenizer's model
  // This rank's share (replica 0's ranks; the other replicas hold the same): each chunk's newest weights,
  // both optimizer moments and, asynchronous runs, the older weight versions its micro-batches in flight read.
  std::vector<SnapshotTensor> tensors;
  const T* values = nullptr;  // the host memory they were copied to
  std::size_t elements = 0;   // of it, used
  // Element ranges [first, first + count) of the state itself (weights, moments), never written non-finite.
  std::vector<std::pair<std::size_t, std::size_t>> must_be_finite;
  std::shared_ptr<const std::vector<std::string>> nodes;  // of every world rank, for the messages (comm::Bound)
  // The replicas' comparison at the step boundary (runtime/replica_check.hpp): the state hash they agreed on,
  // recorded in the file, or what differs (then nothing is written).
  std::uint64_t state_hash = 0;
  std::optional<runtime::SilentCorruption> corruption;
};

// The host elements the snapshots of this rank's stage need at most (the memory plan's snapshot category,
// memory/plan.cpp, in bytes).
template <class T, class A> std::size_t snapshot_capacity(const runtime::StageModel<T, A>& stage);

// Compares the replicas' states, then copies the state at step boundary `step` into `memory` (snapshot_capacity
// elements, host-accessible) with `space`, and waits for the copy: afterwards the training may change the state.
// Collective over the world (one bounded allgather: every rank calls it at the same step boundary).
template <class T, class A>
Snapshot<T> take_snapshot(runtime::StageModel<T, A>& stage, std::int64_t step, const data::Tokenizer& tokenizer,
                          T* memory, const ExecSpace& space);

// Writes a snapshot as a checkpoint of dir and publishes it (save_checkpoint's whole promise). Collective over
// dir.comm(); calls no Kokkos, so that it can run on a thread of its own while the training runs; its HDF5
// calls hold h5::exclusive().
template <class T> SaveResult write_snapshot(const Snapshot<T>& snapshot, const CheckpointDir& dir);

}  // namespace kpipe::io::detail
