#pragma once
// A fence that says why it waits. Kokkos (3.5 on) hands the name to profiling tools, so that a tool, or a test
// counting a step's fences (tests/model/test_launch_budget.cpp), tells kpipe's waits apart from one another and
// from Kokkos' own. Names are "kpipe::<where>: <why>", written once at the call.
#include <Kokkos_Core.hpp>

namespace kpipe {

template <class Space> void named_fence(const Space& space, const char* why) {
#if KOKKOS_VERSION >= 30500
  space.fence(why);
#else
  (void)why;  // Kokkos 3.4's fences take no name
  space.fence();
#endif
}

}  // namespace kpipe
