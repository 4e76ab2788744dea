#include "kpipe/runtime/metrics.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/core/step_number.hpp"

namespace kpipe::runtime {

namespace {
// nlohmann::json writes doubles with enough digits to round-trip; NaN and infinity become null.
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  require_writable(path, fmt::format("output.metrics = '{}'", path));  // never over a device or a FIFO
  out_.open(path, std::ios::trunc);
  require(bool(out_), "output.metrics = '{}': cannot open for writing ({})", path, std::strerror(errno));
}

void MetricsWriter::write_step(const StepStats& s) {
  if (!out_.is_open()) return;
  nlohmann::json j = {{"step", step_number(s.step)},
                      {"loss", number(s.loss)},
                      {"lr", number(s.lr)},
                      {"grad_norm", number(s.grad_norm)},
                      {"tokens_per_s", number(s.seconds > 0 ? s.tokens / s.seconds : 0.0)},
                      {"step_seconds", number(s.seconds)},
                      {"checkpoint_wait_seconds", number(s.checkpoint_wait_seconds)},
                      {"skipped", s.skipped}};  // loss or gradient not finite: no update
  write(j.dump());
}

void MetricsWriter::write_validation(std::int64_t step, double val_loss) {
  if (!out_.is_open()) return;
  write(nlohmann::json({{"validation", true}, {"step", step}, {"val_loss", number(val_loss)}}).dump());
}

void MetricsWriter::write_checkpoint(std::int64_t step, const std::string& file, double seconds) {
  if (!out_.is_open()) return;
  write(nlohmann::json({{"checkpoint", file}, {"step", step}, {"seconds", number(seconds)}}).dump());
}

void MetricsWriter::write_final(const FinalMetrics& f) {
  if (!out_.is_open()) return;
  nlohmann::json j = {{"final", true},
                      {"steps", f.steps},
                      {"skipped_steps", f.skipped_steps},
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
  write(j.dump());
}

void MetricsWriter::write(const std::string& line) {
  errno = 0;
  out_ << line << '\n';
  out_.flush();
  if (!out_)
    throw std::runtime_error(fmt::format("output.metrics = '{}': cannot write ({})", path_,
                                         errno ? std::strerror(errno) : "write error"));
}

void MetricsWriter::write_corruption(const SilentCorruption& c) {
  if (!out_.is_open()) return;
  std::string exclude;
  for (const auto& node : c.nodes) exclude += (exclude.empty() ? "" : ",") + node;
  const nlohmann::json j = {
      {"silent_corruption", true}, {"what", c.what}, {"ranks", c.ranks}, {"nodes", c.nodes}, {"exclude", exclude}};
  write(j.dump());
}

std::string checksum_hex(std::uint64_t checksum) { return hash_hex(checksum); }

}  // namespace kpipe::runtime
