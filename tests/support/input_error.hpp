#pragma once
// Asserts that f throws an InputError of one line that contains every one of `parts` (the key, the value).
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

}  // namespace kpipe::test
