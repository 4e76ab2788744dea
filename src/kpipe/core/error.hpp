#pragma once
// Two kinds of failure. InputError: the user's input (config, data, checkpoint, schedule, world size) is
// wrong; the message is one line naming the key and the value, and apps exit with ExitCode::bad_input on every
// rank (core/exit_codes.hpp).
// Anything else is a bug or a system failure.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kpipe {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws InputError with a formatted message when cond is false.
template <class... Args>
void require(bool cond, fmt::format_string<Args...> format, Args&&... args) {
  if (!cond) throw InputError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kpipe
