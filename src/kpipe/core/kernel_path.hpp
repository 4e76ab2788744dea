#pragma once
// Which shape a kernel takes. A kernel with a split has two:
//  - the host path: one thread per row or per block of elements, inner loops over raw pointers written for
//    the vectorizer;
//  - the device path: a team of threads per row, one thread per element (coalesced).
// (Attention's products are strided-batched vendor products on both paths; only its softmax kernels split.)
// Kernels take the host path where kpipe's memory is host memory (Serial, OpenMP) and the device path on
// GPUs. A build configured with KPIPE_DEVICE_PATH_ON_HOST=ON takes the device path on host backends too, so
// that a CPU runs (and CI tests) the code a GPU runs. Each split kernel takes the path as a template
// parameter that defaults to the build's, so tests/nn/test_kernel_paths.cpp runs both side by side.
#include "kpipe/build_config.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe {

enum class KernelPath { host, device };

// True where kpipe's tensors live in host memory (Serial, OpenMP builds).
inline constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

inline constexpr KernelPath default_kernel_path =
    host_memory && !build::device_path_on_host ? KernelPath::host : KernelPath::device;

// The paths a build can run: both on host backends; on a GPU only the device path (the host path's
// one-thread-per-row loops would be valid there, but slow and never used).
inline constexpr bool path_available(KernelPath p) { return p == KernelPath::device || host_memory; }

// Runs f(team) for league teams: on a GPU with Kokkos' choice of team size; on a CPU with every thread the
// backend lends one team (Kokkos::AUTO would pick one thread there, and the device path's lane splits,
// team reductions and barriers would never run with more than one lane).
template <class F> void for_each_team(const char* label, const ExecSpace& space, std::int64_t league, const F& f) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  if constexpr (host_memory) {
    const int size = Policy(space, league, 1).team_size_max(f, Kokkos::ParallelForTag());
    Kokkos::parallel_for(label, Policy(space, league, size), f);
  } else {
    Kokkos::parallel_for(label, Policy(space, league, Kokkos::AUTO), f);
  }
}

}  // namespace kpipe
