#pragma once
// A count and its noun, as messages print them: "1 chunk", "2 chunks", "0 steps".
#include <fmt/format.h>

#include <string>
#include <string_view>

namespace kpipe {

// The noun takes an s unless the count is 1, es after a sibilant ("micro-batches"): kpipe's nouns are regular.
inline std::string quantity(long long count, std::string_view noun) {
  const auto ends = [&](std::string_view end) {
    return noun.size() >= end.size() && noun.substr(noun.size() - end.size()) == end;
  };
  const bool sibilant = ends("s") || ends("x") || ends("z") || ends("ch") || ends("sh");
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : sibilant ? "es" : "s");
}

}  // namespace kpipe
