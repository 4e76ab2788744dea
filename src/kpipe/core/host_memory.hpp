#pragma once
// Host memory that can still be had, for checks made before a large allocation: the node's, and this
// process's (the node's, and no more than its address-space limit, `ulimit -v`, leaves).
#include <cstdint>

namespace kpipe {

// MemAvailable of /proc/meminfo; -1 when unknown.
std::int64_t node_memory_available();

// The node's, and no more than RLIMIT_AS leaves above what this process maps now; -1 when neither is known.
std::int64_t process_memory_available();

}  // namespace kpipe
