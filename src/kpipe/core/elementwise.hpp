#pragma once
// Elementwise kernels over n contiguous elements. On host backends each work item is a block of
// contiguous elements that the kernel walks with raw KOKKOS_RESTRICT pointers, so the compiler vectorizes
// the inner loop (one call per element through a functor's views defeats that: the views' pointers are
// reloaded every iteration). On devices a block is one element, one per thread, coalesced. Which of the two
// is the kernel path's choice (core/kernel_path.hpp).
#include "kpipe/core/kernel_path.hpp"

namespace kpipe {

// True where the build's kernels take the host path: the place for loops written for the vectorizer.
inline constexpr bool host_kernels = default_kernel_path == KernelPath::host;

template <KernelPath P = default_kernel_path>
inline constexpr std::int64_t elementwise_block = P == KernelPath::host ? 2048 : 1;

// Reductions over n contiguous terms for host kernels: simd_lanes running partial results, term j going to
// lane j % simd_lanes, then the lanes combined pairwise. The order is fixed by n alone (so a result is the
// same on every rank and every run), and the lane loop is a whole vector register of independent
// accumulators, which the compiler vectorizes without being allowed to reassociate anything.
inline constexpr int simd_lanes = 16;

template <class R, class F> KOKKOS_INLINE_FUNCTION R lane_sum(std::int64_t n, const F& term) {
  R acc[simd_lanes];
  for (int l = 0; l < simd_lanes; ++l) acc[l] = R(0);
  std::int64_t j = 0;
  for (; j + simd_lanes <= n; j += simd_lanes)
    for (int l = 0; l < simd_lanes; ++l) acc[l] += term(j + l);
  // The tail as masked lanes (not a scalar loop over acc[runtime index], which would keep acc in memory).
  for (int l = 0; l < simd_lanes; ++l)
    if (j + l < n) acc[l] += term(j + l);
  for (int width = simd_lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

// max over j in [0, n) of term(j), n >= 1 (max is exact: the lanes cannot change the result).
template <class R, class F> KOKKOS_INLINE_FUNCTION R lane_max(std::int64_t n, const F& term) {
  R acc[simd_lanes];
  const R first = term(0);
  for (int l = 0; l < simd_lanes; ++l) acc[l] = first;
  std::int64_t j = 0;
  for (; j + simd_lanes <= n; j += simd_lanes)
    for (int l = 0; l < simd_lanes; ++l) {
      const R v = term(j + l);
      acc[l] = acc[l] < v ? v : acc[l];
    }
  for (int l = 0; l < simd_lanes; ++l)
    if (j + l < n) {
      const R v = term(j + l);
      acc[l] = acc[l] < v ? v : acc[l];
    }
  for (int width = simd_lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] = acc[l] < acc[l + width] ? acc[l + width] : acc[l];
  return acc[0];
}

// Sums over a run of rows per column (the embedding's token gradient, and the groups of core/column_sums.hpp's
// host path): on host backends one work item owns column_block neighbouring columns and walks the rows keeping
// their partial sums in registers (contiguous loads, vectorized); on devices one thread per column (coalesced).
// The additions happen in the same order either way, so the result does not depend on the width.
template <KernelPath P = default_kernel_path> inline constexpr int column_block = P == KernelPath::host ? 64 : 1;

// Calls f(begin, end) over [0, n) in blocks, as kernel `label`.
template <KernelPath P = default_kernel_path, class F>
void for_each_block(const char* label, const ExecSpace& space, std::int64_t n, const F& f) {
  const std::int64_t block = elementwise_block<P>;
  Kokkos::parallel_for(label, range(space, (n + block - 1) / block), KOKKOS_LAMBDA(std::int64_t b) {
    const std::int64_t begin = b * block;
    f(begin, begin + block < n ? begin + block : n);
  });
}

// Calls f(i, j0, j1) for row i and columns [j0, j1) of a rows x cols row-major matrix: on host backends one
// whole row per work item (a contiguous inner loop that vectorizes), on devices one element per thread.
template <KernelPath P = default_kernel_path, class F>
void for_each_row_span(const char* label, const ExecSpace& space, std::int64_t rows, std::int64_t cols, const F& f) {
  if constexpr (P == KernelPath::host) {
    Kokkos::parallel_for(label, range(space, rows), KOKKOS_LAMBDA(std::int64_t i) { f(i, std::int64_t(0), cols); });
  } else {
    Kokkos::parallel_for(label, range(space, rows * cols), KOKKOS_LAMBDA(std::int64_t k) {
      const std::int64_t i = k / cols, j = k - i * cols;
      f(i, j, j + 1);
    });
  }
}

}  // namespace kpipe
