#pragma once
// The roofline of the work ledger (model/kernel_ledger.hpp) on a named GPU: a launch can run no faster than its
// arithmetic at the peak of its precision, nor than its bytes at the memory's bandwidth, and it pays a launch's
// overhead besides. What a kernel measures above its bound is what it leaves on the table; scripts/gpu-check.sh
// prints the two side by side.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kpipe/model/kernel_ledger.hpp"

namespace kpipe::model {

// Dense peaks (no sparsity) from the vendor's datasheets, FLOP/s and bytes/s.
struct GpuSpec {
  std::string name;
  double fp32_flops = 0;   // CUDA cores
  double tf32_flops = 0;   // tensor cores
  double bf16_flops = 0;   // tensor cores
  double bandwidth = 0;    // HBM, bytes/s
  double launch_seconds = 0;  // the fixed cost of a launch (or vendor call, or copy) on the stream
  double peak(Arithmetic arithmetic) const;
};

// What a launch costs a GPU at least, whichever the roofline: 4 us, the order of a kernel launch's latency with
// its dependency on the previous one on one stream (what a step without CUDA graphs pays per launch).
inline constexpr double default_launch_seconds = 4e-6;

// "h100" (SXM, HBM3) or "h200"; nullopt for other names.
std::optional<GpuSpec> gpu_spec(std::string_view name);
std::vector<std::string> gpu_names();

// max(flops / peak, bytes / bandwidth) + the launch overhead.
double launch_bound(const Launch& launch, Arithmetic arithmetic, const GpuSpec& gpu);
// Over the entry's launches.
double entry_bound(const LedgerEntry& entry, const GpuSpec& gpu);

struct PassTotals {
  Pass pass = Pass::forward;
  int launches = 0;  // kernels, vendor calls and copies
  double flops = 0, bytes = 0;
  double seconds = 0;  // the sum of the bounds
};
// One per pass, in all_passes order.
std::vector<PassTotals> pass_totals(const KernelLedger& ledger, const GpuSpec& gpu);

}  // namespace kpipe::model
