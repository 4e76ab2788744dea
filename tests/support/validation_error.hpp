#pragma once
// What the validator says of a schedule: the message of its InputError, or "(valid)".
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::test {

inline std::string validation_error(const schedule::Schedule& s) {
  try {
    schedule::validate(s);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(valid)";
}

inline std::string validation_error(const std::string& text) { return validation_error(schedule::parse(text)); }

}  // namespace kpipe::test
