#pragma once
// The deeper check for runs without replicas to compare (check.recompute_every): a forward run twice on the
// same inputs and weights gives the same bytes (kpipe's kernels are deterministic), so on a checked step each
// rank runs the first forward of each of its chunks again, right after the executor ran it, and compares the
// output's state hash (core/order_free_hash.hpp: the activation sent on, or the last stage's logits) before and
// after. A difference is a unit that computes wrong bits now and then; the run stops as for replicas that
// differ (runtime/replica_check.hpp). Its cost: one forward of one micro-batch per chunk and checked step
// (docs/performance.md).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kpipe/runtime/replica_check.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/step_stats.hpp"

namespace kpipe::runtime {

template <class T, class A> class RecomputeCheck {
 public:
  explicit RecomputeCheck(StageModel<T, A>& stage) : stage_(&stage) {}

  // Step `step`'s first forward on each chunk is run twice (until the next arm()).
  void arm(std::int64_t step);
  // Called after every compute action (Trainer::set_observer): where the check runs.
  void observe(const schedule::Action& action, int slot);
  // Collective over the world, after the armed step: the ranks whose forward gave different bytes, the same on
  // every rank (nothing when none did).
  std::optional<SilentCorruption> verdict();

 private:
  std::uint64_t output_hash(int chunk, int slot) const;

  StageModel<T, A>* stage_;
  std::int64_t step_ = -1;
  std::vector<bool> done_;  // per chunk: checked in the armed step
  int mismatch_microbatch_ = -1, mismatch_chunk_ = -1;
};

}  // namespace kpipe::runtime
