#include "kpipe/runtime/memory_report.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/bytes.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::runtime {

template <class T, class A>
MemoryReport memory_report(const StageModel<T, A>& stage, const RunPlan& run, const memory::Meter& meter) {
  const auto& grid = stage.grid();
  const auto plan = memory::plan_rank_for<T, A>(stage.config(), stage.desc(), run.schedule, grid.replica, grid.stage);
  constexpr int n = memory::category_count;
  std::vector<std::int64_t> mine(2 * n + 1);
  const auto measured = meter.peak();
  for (int c = 0; c < n; ++c) {
    mine[c] = plan.bytes[c];
    mine[n + c] = measured[c];
  }
  mine[2 * n] = meter.other_peak();
  const std::vector<std::int64_t> all =
      comm::allgather(mine, grid.world, {stage.config().pipeline.recv_timeout_s, "gathering the memory report"});
  MemoryReport report;
  for (int r = 0; r < grid.world_size; ++r) {
    const std::int64_t* row = &all[std::size_t(r) * mine.size()];
    memory::Bytes p{}, m{};
    for (int c = 0; c < n; ++c) {
      p[c] = row[c];
      m[c] = row[n + c];
    }
    report.predicted.push_back(p);
    report.measured.push_back(m);
    report.other.push_back(row[2 * n]);
  }
  return report;
}

std::string format_memory_report(const MemoryReport& r) {
  auto mib = [](std::int64_t bytes) { return double(bytes) / (1024.0 * 1024.0); };
  std::string text = fmt::format("{:<5}", "rank");
  for (auto c : memory::all_categories) text += fmt::format(" {:>15}", memory::to_string(c));
  text += fmt::format(" {:>15}\n", "total");
  for (std::size_t rank = 0; rank < r.predicted.size(); ++rank) {
    text += fmt::format("{:<5}", rank);
    for (auto c : memory::all_categories)
      text += fmt::format(" {:>15}", fmt::format("{:.2f}/{:.2f}", mib(r.predicted[rank][int(c)]),
                                                 mib(r.measured[rank][int(c)])));
    text += fmt::format(" {:>15}\n", fmt::format("{:.2f}/{:.2f}", mib(memory::total(r.predicted[rank])),
                                                 mib(memory::total(r.measured[rank]))));
  }
  std::int64_t other = 0;
  for (auto o : r.other) other = std::max(other, o);
  text += r.matches() ? "every category as predicted" : "measured differs from predicted (a bug: please report it)";
  text += fmt::format("; Kokkos' own allocations (not predicted): at most {} per rank", format_bytes(other));
  return text;
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template MemoryReport memory_report(const StageModel<T, A>&, const RunPlan&, const memory::Meter&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
