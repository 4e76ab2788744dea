#include "kpipe/model/roofline.hpp"

#include <algorithm>

namespace kpipe::model {

double GpuSpec::peak(Arithmetic arithmetic) const {
  switch (arithmetic) {
    case Arithmetic::fp32: return fp32_flops;
    case Arithmetic::tf32: return tf32_flops;
    case Arithmetic::bf16: return bf16_flops;
  }
  return fp32_flops;
}

namespace {
// H100 SXM5 and H200: the same Hopper die and clocks, so the same peaks; the H200's HBM3e is faster.
GpuSpec hopper(const char* name, double bandwidth) {
  return {name, 67e12, 495e12, 989e12, bandwidth, default_launch_seconds};
}
}  // namespace

std::optional<GpuSpec> gpu_spec(std::string_view name) {
  if (name == "h100") return hopper("h100", 3.35e12);
  if (name == "h200") return hopper("h200", 4.8e12);
  return std::nullopt;
}

std::vector<std::string> gpu_names() { return {"h100", "h200"}; }

double launch_bound(const Launch& launch, Arithmetic arithmetic, const GpuSpec& gpu) {
  return std::max(launch.flops / gpu.peak(arithmetic), launch.bytes / gpu.bandwidth) + gpu.launch_seconds;
}

double entry_bound(const LedgerEntry& entry, const GpuSpec& gpu) {
  double seconds = 0;
  for (const Launch& l : entry.calls) seconds += launch_bound(l, entry.arithmetic, gpu);
  return seconds;
}

std::vector<PassTotals> pass_totals(const KernelLedger& ledger, const GpuSpec& gpu) {
  std::vector<PassTotals> totals;
  for (const Pass pass : all_passes) {
    PassTotals t;
    t.pass = pass;
    for (const LedgerEntry& e : ledger.entries) {
      if (e.pass != pass) continue;
      t.launches += e.launches();
      t.flops += e.flops();
      t.bytes += e.bytes();
      t.seconds += entry_bound(e, gpu);
    }
    totals.push_back(t);
  }
  return totals;
}

}  // namespace kpipe::model
