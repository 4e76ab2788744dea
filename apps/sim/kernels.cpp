// kpipe-sim kernels: the work ledger of one micro-batch on a GPU (model/kernel_ledger.hpp) with each kernel's
// roofline bound (model/roofline.hpp), as a table or CSV; the micro-batch is the configuration's,
// train.batch / train.microbatches sequences of its model.
//   kpipe-sim kernels [--gpu h100|h200] [--format table|csv] [kpipe-train's options]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/model/kernel_ledger.hpp"
#include "kpipe/model/roofline.hpp"
#include "common.hpp"

namespace kpipe::apps::sim {
namespace {

using model::KernelLedger;
using model::LedgerEntry;

struct KernelOptions {
  std::string gpu = "h100";  // a ledger's bounds need a GPU: the other subcommands' --gpu has no default
  std::string format = "table";
};

// The seconds an entry's arithmetic and its bytes take at the GPU's rates, over its launches.
struct Terms {
  double compute = 0, memory = 0;
};
Terms terms_of(const LedgerEntry& e, const model::GpuSpec& gpu) {
  return {e.flops() / gpu.peak(e.arithmetic), e.bytes() / gpu.bandwidth};
}

// What bounds an entry: its arithmetic, its bytes, or (where both are below it) the launches' fixed cost.
const char* limit_of(const LedgerEntry& e, const model::GpuSpec& gpu) {
  const Terms t = terms_of(e, gpu);
  if (std::max(t.compute, t.memory) < e.launches() * gpu.launch_seconds) return "launch";
  return t.compute >= t.memory ? "compute" : "memory";
}

std::string count_or_dash(std::int64_t n) { return n > 0 ? fmt::format("{}", n) : "-"; }

void print_table(const KernelLedger& ledger, const model::GpuSpec& gpu) {
  const auto& m = ledger.model;
  std::printf("kernels of one micro-batch on %s: d_model %d, %d heads, %d layers, seq_len %d, vocab %d, "
              "mlp_ratio %d; %d sequences; %s\n",
              gpu.name.c_str(), m.d_model, m.n_heads, m.n_layers, m.seq_len, m.vocab, m.mlp_ratio, ledger.sequences,
              fmt::format("{}", ledger.precision).c_str());
  std::printf("bound = max(FLOPs / peak, bytes / %.3g TB/s) + %.0f us a launch; peaks (TFLOP/s): fp32 %.0f, "
              "tf32 %.0f, bf16 %.0f; items: work items of the smallest launch (teams of Kokkos::AUTO size: %d lanes)\n",
              gpu.bandwidth / 1e12, gpu.launch_seconds * 1e6, gpu.fp32_flops / 1e12, gpu.tf32_flops / 1e12,
              gpu.bf16_flops / 1e12, model::assumed_team_lanes);
  std::printf("\n%-15s %-6s %-62s %8s %11s %6s %9s %9s %11s %-7s\n", "pass", "kind", "label", "launches", "items",
              "serial", "GFLOP", "MB", "bound (us)", "limit");
  for (const LedgerEntry& e : ledger.entries)
    std::printf("%-15s %-6s %-62s %8d %11s %6s %9.3f %9.2f %11.1f %-7s\n", model::to_string(e.pass),
                model::to_string(e.kind), e.label.c_str(), e.launches(), count_or_dash(e.fewest_items()).c_str(),
                count_or_dash(e.longest_serial()).c_str(), e.flops() / 1e9, e.bytes() / 1e6,
                model::entry_bound(e, gpu) * 1e6, limit_of(e, gpu));
  std::printf("\n%-15s %8s %10s %10s %11s\n", "pass", "launches", "GFLOP", "MB", "bound (ms)");
  double seconds = 0, flops = 0;
  for (const model::PassTotals& t : model::pass_totals(ledger, gpu)) {
    std::printf("%-15s %8d %10.2f %10.1f %11.3f\n", model::to_string(t.pass), t.launches, t.flops / 1e9, t.bytes / 1e6,
                t.seconds * 1e3);
    seconds += t.seconds;
    flops += t.flops;
  }
  const double tokens = double(ledger.sequences) * m.seq_len;
  // The products' arithmetic: the peak a precision's share is quoted against (as gpu-check quotes it).
  const model::Arithmetic products = ledger.precision == Precision::bf16   ? model::Arithmetic::bf16
                                     : ledger.precision == Precision::tf32 ? model::Arithmetic::tf32
                                                                           : model::Arithmetic::fp32;
  std::printf("%-15s %8s %10.2f %10s %11.3f  (at most %.0f tokens/s, %.1f%% of the %s peak; without the "
              "optimizer step)\n",
              "micro-batch", "", flops / 1e9, "", seconds * 1e3, tokens / seconds,
              100 * flops / seconds / gpu.peak(products), model::to_string(products));
}

// One line per entry, for scripts: bound_us is the entry's bound over all its launches.
void print_csv(const KernelLedger& ledger, const model::GpuSpec& gpu) {
  std::printf("pass,label,kind,arithmetic,launches,items,serial,flops,bytes,bound_us\n");
  for (const LedgerEntry& e : ledger.entries)
    std::printf("%s,%s,%s,%s,%d,%lld,%lld,%.6g,%.6g,%.6g\n", model::to_string(e.pass), e.label.c_str(),
                model::to_string(e.kind), model::to_string(e.arithmetic), e.launches(),
                static_cast<long long>(e.fewest_items()), static_cast<long long>(e.longest_serial()), e.flops(),
                e.bytes(), model::entry_bound(e, gpu) * 1e6);
}

}  // namespace

int kernels_main(int argc, char** argv) {
  KernelOptions o;
  const auto command = parse_subcommand(
      argc, argv, "kpipe-sim kernels: every kernel of one micro-batch on a GPU, with its roofline bound",
      [&](CLI::App& app) {
        app.add_option("--gpu", o.gpu, fmt::format("the GPU of the bounds: {}", fmt::join(model::gpu_names(), ", ")))
            ->group("[kpipe-sim kernels]")->capture_default_str();
        app.add_option("--format", o.format, "table or csv")->group("[kpipe-sim kernels]")->capture_default_str();
      });
  if (command.exit_now) return command.exit_code;
  const auto gpu = model::gpu_spec(o.gpu);
  require(gpu.has_value(), "--gpu = {}: expected one of {}", o.gpu, fmt::join(model::gpu_names(), ", "));
  require(o.format == "table" || o.format == "csv", "--format = {}: expected one of table, csv", o.format);
  const Config& config = command.config;
  const KernelLedger ledger =
      model::kernel_ledger(config.model, config.train.batch / config.train.microbatches, config.train.precision);
  if (o.format == "csv") {
    print_csv(ledger, *gpu);
  } else {
    print_table(ledger, *gpu);
  }
  return 0;
}

}  // namespace kpipe::apps::sim
