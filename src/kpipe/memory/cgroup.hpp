#pragma once
// The memory a control group still lets this process use: the limit a batch system (Slurm's --mem under
// task/cgroup), a container or systemd sets, which the kernel enforces with its OOM killer long before the
// node's MemAvailable runs out. cgroup v2 (memory.max, memory.current) and v1 (memory.limit_in_bytes,
// memory.usage_in_bytes), at the process's own group and at every ancestor up to the root of the mounted
// hierarchy: a parent's limit binds its children (Slurm limits the job's group and the step's within it).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

namespace kpipe::memory {

struct CgroupMemory {
  int version = 2;
  std::string group;       // the directory of the group whose limit binds, for messages
  std::int64_t limit = 0;  // its limit
  std::int64_t used = 0;   // its use, less the page cache the kernel can drop before it kills (inactive files)
  std::int64_t remaining() const { return std::max<std::int64_t>(limit - used, 0); }
};

// The group with the least memory left of all this process's memory groups (v2 and v1 in a hybrid layout), or
// none where no group limits memory (or no cgroup file system is mounted). `root` is the root of the file
// system it reads proc/self/cgroup, proc/self/mountinfo and the groups' files under: "/", or a test's directory.
std::optional<CgroupMemory> cgroup_memory(const std::string& root = "/");

}  // namespace kpipe::memory
