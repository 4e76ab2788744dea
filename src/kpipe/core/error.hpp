#pragma once
// Two kinds of failure. InputError: the user's input (config, data, checkpoint, schedule, world size) is
// wrong; the message is one line naming the key and the value, and apps exit with ExitCode::bad_input on every
// rank (core/exit_codes.hpp).
// Anything else is a bug or a system failure.
#include <fmt/format.h>

#include <new>
#include <stdexcept>
#include <string>

#include "kpipe/core/bytes.hpp"

namespace kpipe {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws InputError with a formatted message when cond is false.
template <class... Args>
void require(bool cond, fmt::format_string<Args...> format, Args&&... args) {
  if (!cond) throw InputError(fmt::format(format, std::forward<Args>(args)...));
}

// Runs build(), which builds `built` in memory as the input `input` asks ("data.synthetic_tokens = 4000000000");
// when the memory is not there (std::bad_alloc), throws InputError naming both and about how much it needs:
// "data.synthetic_tokens = 4000000000: out of memory: the synthetic corpus needs about 18.6 GiB".
template <class Build>
decltype(auto) building_in_memory(const std::string& input, const std::string& built, double bytes, Build&& build) {
  try {
    return build();
  } catch (const std::bad_alloc&) {
    throw InputError(fmt::format("{}: out of memory: {} needs about {}", input, built, format_estimated_bytes(bytes)));
  }
}

}  // namespace kpipe
