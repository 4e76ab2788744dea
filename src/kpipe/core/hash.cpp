#include "kpipe/core/hash.hpp"

#include <fmt/format.h>

namespace kpipe {

std::string hash_hex(std::uint64_t hash) { return fmt::format("{:016x}", hash); }

}  // namespace kpipe
