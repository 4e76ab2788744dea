#pragma once
// Where a kernel over a flat buffer of fp32 weights also writes them rounded to bf16: the compute copy that
// mixed precision keeps of the matrices the products read (model/parameters.hpp). The buffer is cut into
// segments [starts(k), starts(k + 1)); segment k's elements go to compute + offsets(k) onwards, or nowhere
// where offsets(k) < 0. A table of segments, not one launch per tensor: the refresh of a whole chunk and the
// optimizer's update (nn/optimizer.hpp) write the copy in the kernel they run anyway.
#include <cstdint>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe {

struct RoundedCopy {
  bf16* compute = nullptr;            // null: no copy to write
  View1<const std::int64_t> starts;   // [segments + 1]: 0, ..., the buffer's length
  View1<const std::int64_t> offsets;  // [segments]: into compute, -1 for a segment without a copy

  KOKKOS_INLINE_FUNCTION bool empty() const { return compute == nullptr; }
};

// The segment that holds element i: the last k with starts(k) <= i (a binary search; tables are a few
// segments per layer).
KOKKOS_INLINE_FUNCTION std::int64_t segment_of(const RoundedCopy& copy, std::int64_t i) {
  std::int64_t low = 0, high = std::int64_t(copy.offsets.extent(0));  // starts(low) <= i < starts(high)
  while (high - low > 1) {
    const std::int64_t mid = (low + high) / 2;
    if (copy.starts(mid) <= i) {
      low = mid;
    } else {
      high = mid;
    }
  }
  return low;
}

// compute := bf16(values) over elements [begin, end) of the buffer, each rounded once (narrow), segment by
// segment: contiguous runs, which vectorize on host backends.
KOKKOS_INLINE_FUNCTION void round_range(const RoundedCopy& copy, const float* values, std::int64_t begin,
                                        std::int64_t end) {
  for (std::int64_t k = segment_of(copy, begin); begin < end; ++k) {
    const std::int64_t segment_end = copy.starts(k + 1) < end ? copy.starts(k + 1) : end;
    if (copy.offsets(k) >= 0) {
      bf16* KOKKOS_RESTRICT to = copy.compute + copy.offsets(k) - copy.starts(k);
      for (std::int64_t i = begin; i < segment_end; ++i) to[i] = narrow<bf16>(values[i]);
    }
    begin = segment_end;
  }
}

}  // namespace kpipe
