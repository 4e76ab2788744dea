#pragma once
// The maximum of a row's strided share, for the row-per-team kernels (softmax, cross-entropy): each thread
// of a team sweeps row[lane], row[lane + lanes], ... and the team then combines the shares.
#include <Kokkos_Core.hpp>

#include "kpipe/core/math.hpp"

namespace kpipe::nn {

// max of row[first], row[first + stride], ... up to row[last], first <= last. The restrict-qualified
// parameter tells the compiler that the row aliases nothing else (a running maximum that could alias the
// row is stored back on every step); four running maxima hide the latency of each comparison, and since
// max is exact their order cannot change the result.
template <class T>
KOKKOS_INLINE_FUNCTION T strided_max(const T* KOKKOS_RESTRICT row, int first, int last, int stride) {
  T m0 = row[first], m1 = m0, m2 = m0, m3 = m0;
  int j = first;
  for (; j + 3 * stride <= last; j += 4 * stride) {
    m0 = math::max(m0, row[j]);
    m1 = math::max(m1, row[j + stride]);
    m2 = math::max(m2, row[j + 2 * stride]);
    m3 = math::max(m3, row[j + 3 * stride]);
  }
  for (; j <= last; j += stride) m0 = math::max(m0, row[j]);
  return math::max(math::max(m0, m1), math::max(m2, m3));
}

}  // namespace kpipe::nn
