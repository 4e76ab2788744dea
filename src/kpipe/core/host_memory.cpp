#include "kpipe/core/host_memory.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace kpipe {
namespace {

// The value of `key` in a /proc file of "Key:   1234 kB" lines, in bytes; -1 when absent.
std::int64_t proc_kib(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name;
    long long kib = 0;
    if (fields >> name >> kib && name == key) return std::int64_t(kib) * 1024;
  }
  return -1;
}

}  // namespace

std::int64_t node_memory_available() { return proc_kib("/proc/meminfo", "MemAvailable:"); }

std::int64_t process_memory_available() {
  std::int64_t available = node_memory_available();
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const std::int64_t mapped = std::max<std::int64_t>(proc_kib("/proc/self/status", "VmSize:"), 0);
    const std::int64_t left = std::max<std::int64_t>(std::int64_t(limit.rlim_cur) - mapped, 0);
    available = available < 0 ? left : std::min(available, left);
  }
  return available;
}

}  // namespace kpipe
