#pragma once
// Tensor aliases: every tensor is a Kokkos::View in LayoutRight (row-major, as the math is written),
// in the default execution space's memory. Activations are 2-D (rows = tokens, cols = features).
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>

namespace kpipe {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;
// Host memory the device copies from and to asynchronously (page-locked on CUDA): staging buffers of
// messages and tokens. Plain host memory where kernels run on the host.
#if defined(KOKKOS_ENABLE_CUDA)
using PinnedSpace = Kokkos::CudaHostPinnedSpace;
#else
using PinnedSpace = Kokkos::HostSpace;
#endif

template <class T> using View1 = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>;
template <class T> using View2 = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
template <class T> using View3 = Kokkos::View<T***, Kokkos::LayoutRight, MemSpace>;
template <class T> using View4 = Kokkos::View<T****, Kokkos::LayoutRight, MemSpace>;

using Token = std::int32_t;

// Allocation for buffers that are overwritten before being read: skips the zero-fill pass.
inline auto uninitialized(const std::string& label) {
  return Kokkos::view_alloc(Kokkos::WithoutInitializing, label);
}

// A 1-D range policy on a given execution space instance.
inline Kokkos::RangePolicy<ExecSpace> range(const ExecSpace& space, std::int64_t n) {
  return Kokkos::RangePolicy<ExecSpace>(space, 0, n);
}

// A 2-D range over (rows, cols), the shape of most elementwise kernels.
inline Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>> range2(const ExecSpace& space, std::int64_t rows,
                                                                std::int64_t cols) {
  return Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(space, {0, 0}, {rows, cols});
}

}  // namespace kpipe
