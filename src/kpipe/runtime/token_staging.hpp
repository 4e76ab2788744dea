#pragma once
// Host rows of tokens, one micro-batch's inputs and targets each, that the first and last chunks copy to the
// device as each forward needs them (pinned memory on CUDA: the copies are asynchronous). A row is drawn into
// as its micro-batch's first forward here is reached, and not again before the run's final fence, so no copy
// waits for the stream and none reads a row being written.
#include <cstdint>
#include <vector>

#include "kpipe/core/tensor.hpp"
#include "kpipe/model/chunk.hpp"

namespace kpipe::runtime {

class TokenStaging {
 public:
  TokenStaging(int rows, std::int64_t tokens_per_row);  // counted as workspaces (memory/plan.hpp)
  int rows() const { return int(inputs_.extent(0)); }
  Token* inputs(int row) { return &inputs_(row, 0); }
  Token* targets(int row) { return &targets_(row, 0); }
  // Row `row` into the slot's token buffers (first chunk: inputs; last chunk: targets), queued on `space`.
  template <class T, class A> void load(const ExecSpace& space, model::Chunk<T, A>& chunk, int slot, int row) const;

 private:
  Kokkos::View<Token**, Kokkos::LayoutRight, PinnedSpace> inputs_, targets_;
};

// Where a list's forwards read their tokens and leave their losses. The executor asks as it reaches each
// forward on a chunk that reads tokens (the first virtual stage its inputs, the last its targets): a
// micro-batch's windows are drawn when it is about to run, in the executor's one walk of the list.
class TokenSource {
 public:
  TokenSource(TokenStaging& staging, Kokkos::View<double*, MemSpace> losses)
      : staging_(&staging), losses_(std::move(losses)) {}
  virtual ~TokenSource() = default;
  // The row of staging() that holds micro-batch `microbatch`'s windows, drawn into it now if not yet.
  virtual int stage(std::int64_t microbatch) = 0;
  // The slot of losses() that its loss sum goes to.
  virtual int loss_slot(std::int64_t microbatch) const = 0;
  const TokenStaging& staging() const { return *staging_; }
  const Kokkos::View<double*, MemSpace>& losses() const { return losses_; }  // per slot, on the device
  // A host copy, once the run is over: queued on space behind the run's kernels, then one fence.
  std::vector<double> read_losses(const ExecSpace& space) const;

 protected:
  TokenStaging* staging_;
  Kokkos::View<double*, MemSpace> losses_;
};

// Micro-batch k of a list reads row k and leaves its loss in slot k; `draw(k, inputs, targets)` fills the row
// the first time it is asked for in a run (a rank may hold both the first and the last virtual stage).
template <class Draw> class RowPerMicrobatch final : public TokenSource {
 public:
  RowPerMicrobatch(TokenStaging& staging, Kokkos::View<double*, MemSpace> losses, Draw draw)
      : TokenSource(staging, std::move(losses)), draw_(std::move(draw)), drawn_(std::size_t(staging.rows()), false) {}
  int stage(std::int64_t microbatch) override {
    const int row = int(microbatch);
    if (!drawn_.at(std::size_t(row))) draw_(microbatch, staging_->inputs(row), staging_->targets(row));
    drawn_[std::size_t(row)] = true;
    return row;
  }
  int loss_slot(std::int64_t microbatch) const override { return int(microbatch); }

 private:
  Draw draw_;
  std::vector<bool> drawn_;  // per row, in this run
};

}  // namespace kpipe::runtime
