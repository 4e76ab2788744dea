#include "kpipe/runtime/metrics.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/hash.hpp"

namespace kpipe::runtime {

namespace {
// nlohmann::json writes doubles with enough digits to round-trip; NaN and infinity become null.
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  require_writable(path, fmt::format("output.metrics = '{}'", path));  // never over a device or a FIFO
  out_.open(path, std::ios::trunc);
  require(bool(out_), "output.metrics = '{}': cannot open for writing ({})", path, std::strerror(errno));
}

void MetricsWriter::write_step(const StepStats& s) {
  if (!out_.is_open()) return;
  nlohmann::json j = {{"step", s.step},
                      {"loss", number(s.loss)},
                      {"lr", number(s.lr)},
                      {"grad_norm", number(s.grad_norm)},
                      {"tokens_per_s", number(s.seconds > 0 ? s.tokens / s.seconds : 0.0)},
                      {"step_seconds", number(s.seconds)},
                      {"checkpoint_wait_seconds", number(s.checkpoint_wait_seconds)},
                      {"skipped", s.skipped}};  // loss or gradient not finite: no update
  out_ << j.dump() << '\n';
  out_.flush();
}

void MetricsWriter::write_final(const FinalMetrics& f) {
  if (!out_.is_open()) return;
  nlohmann::json j = {{"final", true},
                      {"steps", f.steps},
                      {"val_loss", number(f.val_loss)},
                      {"param_checksum", checksum_hex(f.param_checksum)},
                      {"seconds", number(f.seconds)},
                      {"tokens_per_s", number(f.tokens_per_s)},
                      {"steady_tokens_per_s", number(f.steady_tokens_per_s)},
                      {"num_params", f.num_params},
                      {"measured_bubble", number(f.measured_bubble)},
                      {"simulated_bubble", number(f.simulated_bubble)}};
  // Per rank, bytes by category: {"predicted": {"parameters": ..., ...}, "measured": {...}}.
  nlohmann::json memory = nlohmann::json::array();
  for (std::size_t r = 0; r < f.memory_predicted.size(); ++r) {
    nlohmann::json predicted, measured;
    for (auto c : memory::all_categories) {
      predicted[memory::to_string(c)] = f.memory_predicted[r][int(c)];
      measured[memory::to_string(c)] = f.memory_measured[r][int(c)];
    }
    memory.push_back({{"rank", r}, {"predicted", predicted}, {"measured", measured}});
  }
  j["memory"] = memory;
  out_ << j.dump() << '\n';
  out_.flush();
}

std::string checksum_hex(std::uint64_t checksum) { return hash_hex(checksum); }

}  // namespace kpipe::runtime
