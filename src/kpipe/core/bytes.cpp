#include "kpipe/core/bytes.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace kpipe {

std::optional<std::int64_t> parse_bytes(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value) || value < 0) return std::nullopt;
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(unit.begin());
  const std::pair<const char*, double> units[] = {
      {"", 1},        {"B", 1},       {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0},       {"kB", 1e3},     {"KB", 1e3},        {"MB", 1e6},
      {"GB", 1e9},    {"TB", 1e12},   {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},
      {"T", 1099511627776.0}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      const double bytes = value * scale;
      if (bytes >= 9.2e18) return std::nullopt;
      return std::int64_t(std::llround(bytes));
    }
  return std::nullopt;
}

std::string format_bytes(std::int64_t bytes) {
  if (std::abs(bytes) < 1024) return fmt::format("{} B", bytes);
  return format_estimated_bytes(double(bytes));
}

std::string format_estimated_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = bytes;
  int u = 0;
  while (std::abs(value) >= 1024 && u < 6) {
    value /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.{}f} {}", value, std::abs(value) >= 100 ? 0 : std::abs(value) >= 10 ? 1 : 2, units[u]);
}

}  // namespace kpipe
