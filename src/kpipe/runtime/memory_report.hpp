#pragma once
// Each rank's memory as the plan predicted it (memory/plan.hpp) beside what the meter measured
// (memory/meter.hpp), gathered from every rank of the job, for kpipe-train's report and metrics.
#include <string>
#include <vector>

#include "kpipe/memory/meter.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"

namespace kpipe::runtime {

struct MemoryReport {
  std::vector<memory::Bytes> predicted, measured;  // per world rank
  std::vector<std::int64_t> other;                 // per world rank: Kokkos' own allocations (not predicted)
  bool matches() const { return predicted == measured; }
};

// Collective over the stage's world: every rank gets every rank's figures.
template <class T, class A>
MemoryReport memory_report(const StageModel<T, A>& stage, const RunPlan& plan, const memory::Meter& meter);

// A table, one row per rank, MiB predicted/measured per category, and a last line on what differs.
std::string format_memory_report(const MemoryReport& report);

}  // namespace kpipe::runtime
