#pragma once
// Silent data corruption, caught by determinism. Every layout reproduces one rank bit for bit, so the
// data-parallel replicas of a stage hold the same bytes at every step boundary: the same weights and the same
// optimizer moments (the replicas' reduced gradient enters the moments at the step that reduces it, so a
// gradient corrupted on one replica shows there at once, and in the weights too). Bits that differ are a fault,
// and which replica holds them says where: with three or more replicas the odd one out is named, with two
// both are (nothing tells which is wrong).
//
// The state hash: every element of a rank's weights and moments hashed where it lives
// (core/order_free_hash.hpp), keyed by its place in the whole model, so the model's hash is the sum of its
// stages' on any layout: what a checkpoint records and a load verifies (io/checkpoint.hpp).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/runtime/stage_model.hpp"

namespace kpipe::runtime {

// What a check found: one line (no program prefix) and the world ranks and nodes it names, the same on every
// rank. The run stops with ExitCode::replicas_disagree; a batch job resubmits excluding the nodes.
struct SilentCorruption {
  std::string what;  // "the replicas disagree after step 12: stage 1: replica 2 (rank 5 on node n3) differs ..."
  std::vector<int> ranks;
  std::vector<std::string> nodes;  // of those ranks, each once, in rank order
};

struct ReplicaVerdict {
  std::uint64_t state_hash = 0;                // the whole model's, when the replicas agree
  std::optional<SilentCorruption> corruption;  // when they do not
  bool agreed() const { return !corruption; }
};

// Thrown on every rank alike where a verdict cannot be returned (a checkpoint load, io/checkpoint.hpp).
struct ReplicasDisagree : std::runtime_error {
  explicit ReplicasDisagree(SilentCorruption c) : std::runtime_error(c.what), corruption(std::move(c)) {}
  SilentCorruption corruption;
};

// This rank's share of the state hash: its chunks' newest weights and both moments, on the device. Waits for
// the work queued before it (the step's update).
template <class T, class A> std::uint64_t stage_state_hash(StageModel<T, A>& stage);

// The keys of the state hash: element g of the model (in global layer order) has key 3g for its weight, 3g + 1
// and 3g + 2 for its moments. state_key gives chunk c's first weight's; within a buffer they step by 3. (A
// snapshot hashes the buffers it copies with these, io/checkpoint_snapshot.cpp.)
inline constexpr std::uint64_t state_key_step = 3;
template <class T, class A> std::uint64_t state_key(const StageModel<T, A>& stage, int chunk);

// The verdict from every world rank's share (hashes[w] for world rank w) on `grid`'s layout; `when` says when in
// the message ("after step 12", "after loading step-00000012.h5"). No MPI: the same inputs give every rank the
// same verdict.
ReplicaVerdict judge_replicas(const std::vector<std::uint64_t>& hashes, const comm::ProcessGrid& grid,
                              const std::string& when);

// Collective over the world (one bounded allgather of one number per rank): every rank hashes its share and
// every rank gets the verdict. With `mine`, this rank's share is already hashed (stage_state_hash's value).
template <class T, class A> ReplicaVerdict check_replicas(StageModel<T, A>& stage, const std::string& when);
template <class T, class A>
ReplicaVerdict check_replicas(StageModel<T, A>& stage, const std::string& when, std::uint64_t mine);

}  // namespace kpipe::runtime
