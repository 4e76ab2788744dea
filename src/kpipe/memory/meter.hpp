#pragma once
// Measured memory: every Kokkos allocation and deallocation, counted by category while a Meter lives, from
// Kokkos Tools' callbacks (the category is the innermost kpipe::memory region open at the allocation,
// category.hpp). Allocations outside any such region (Kokkos' own scratch, say) count as "other", which
// the plan does not predict. Callbacks already installed (a Kokkos tool) keep being called.
#include <cstdint>
#include <vector>

#include "kpipe/core/memory_category.hpp"

namespace kpipe::memory {

class Meter {
 public:
  Meter();   // one at a time in a process (std::logic_error otherwise)
  ~Meter();  // the callbacks that were there before come back
  Meter(const Meter&) = delete;
  Meter& operator=(const Meter&) = delete;

  Bytes live() const;   // allocated and not freed, per category
  Bytes peak() const;   // the most each category held at once
  std::int64_t other_live() const;
  std::int64_t other_peak() const;
};

}  // namespace kpipe::memory
