#pragma once
// expect_input_error asserts that f throws an InputError of one line that contains every one of `parts` (the key,
// the value).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kpipe/core/error.hpp"

namespace kpipe::test {

inline void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one mentioning " << parts.front();
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message << " lacks " << part;
  }
}

// The message of the InputError f throws, or "(no error)".
template <class F> std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kpipe::test
