#pragma once
// Host rows of tokens, one micro-batch's inputs and targets each, that the first and last chunks copy to the
// device as each forward needs them. Rows are filled before a list runs and refilled only after its final
// fence, so no copy waits for the stream (pinned memory on CUDA: the copies are asynchronous).
#include <cstdint>

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

}  // namespace kpipe::runtime
