#pragma once
// Elementwise kernels over n contiguous elements. On host backends each work item is a block of
// contiguous elements that the kernel walks with raw KOKKOS_RESTRICT pointers, so the compiler vectorizes
// the inner loop (one call per element through a functor's views defeats that: the views' pointers are
// reloaded every iteration). On devices a block is one element, one per thread, coalesced.
#include "kpipe/core/tensor.hpp"

namespace kpipe {

inline constexpr std::int64_t elementwise_block = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible ? 2048 : 1;

// Column sums (reductions over the rows of a row-major matrix, rows added in order): on host backends one
// work item owns column_block neighbouring columns and walks the rows keeping their partial sums in
// registers (contiguous loads, vectorized); on devices one thread per column (coalesced). The additions
// happen in the same order either way, so the result does not depend on the block width.
inline constexpr int column_block = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible ? 64 : 1;

// Calls f(begin, end) over [0, n) in blocks, as kernel `label`.
template <class F> void for_each_block(const char* label, const ExecSpace& space, std::int64_t n, const F& f) {
  const std::int64_t block = elementwise_block;
  Kokkos::parallel_for(label, range(space, (n + block - 1) / block), KOKKOS_LAMBDA(std::int64_t b) {
    const std::int64_t begin = b * block;
    f(begin, begin + block < n ? begin + block : n);
  });
}

// Calls f(i, j0, j1) for row i and columns [j0, j1) of a rows x cols row-major matrix: on host backends one
// whole row per work item (a contiguous inner loop that vectorizes), on devices one element per thread.
template <class F>
void for_each_row_span(const char* label, const ExecSpace& space, std::int64_t rows, std::int64_t cols, const F& f) {
  if constexpr (Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible) {
    Kokkos::parallel_for(label, range(space, rows), KOKKOS_LAMBDA(std::int64_t i) { f(i, std::int64_t(0), cols); });
  } else {
    Kokkos::parallel_for(label, range(space, rows * cols), KOKKOS_LAMBDA(std::int64_t k) {
      const std::int64_t i = k / cols, j = k - i * cols;
      f(i, j, j + 1);
    });
  }
}

}  // namespace kpipe
