#pragma once
// How every kpipe program ends: whatever escapes its work, in any of its threads (bad input, an allocation
// that failed, a library's error, a bug), becomes one line on stderr, "<program>: error: <what>", with the code
// of the exit-code table (core/exit_codes.hpp), and nothing after it; a standard output that could not be
// written is a failure, not a success (a full disk, a closed pipe). run_program is the frame of the programs
// without MPI (kpipe-prepare, kpipe-inspect); mpi_program.hpp's adds the ranks.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::apps {

// A message on one line: a library's line breaks become spaces.
inline std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// What ended the program: the exit code and the message of its one line.
struct Ending {
  ExitCode code = ExitCode::ok;
  std::string message;
};

// The exception being handled, as an Ending: bad input (InputError) or a failure (code `failure`).
inline Ending ending_of_current_exception(ExitCode failure) {
  try {
    throw;
  } catch (const InputError& e) {
    return {ExitCode::bad_input, one_line(e.what())};
  } catch (const std::bad_alloc&) {
    return {failure, "out of memory"};
  } catch (const std::exception& e) {
    return {failure, one_line(e.what())};
  } catch (...) {
    return {failure, "an exception that is not a std::exception"};
  }
}

// std::terminate's handler: what escapes a thread (a library's worker thread out of memory) ends the program
// as anything else does, in one line with its code, not with the C++ runtime's abort.
template <ExitCode failure> [[noreturn]] void end_on_escape() {
  Ending ending{failure, "ended by std::terminate"};
  if (const std::exception_ptr escaped = std::current_exception()) {
    try {
      std::rethrow_exception(escaped);
    } catch (...) {
      ending = ending_of_current_exception(failure);
    }
  }
  abort_job(ending.code, "error: " + ending.message);
}

// Set up first thing in a program's main: HDF5 (h5/file.hpp), and end_on_escape for std::terminate.
inline void start_program(ProgramName program) {
  h5::start_for_program();
  std::set_terminate(failure_code(program) == ExitCode::failure ? &end_on_escape<ExitCode::failure>
                                                                : &end_on_escape<ExitCode::bad_input>);
}

// Flushes stdout: the reason it could not be written (EPIPE, ENOSPC, EIO), or "" when all of it was.
inline std::string stdout_failure() {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return {};
  return fmt::format("cannot write to standard output ({})", errno ? std::strerror(errno) : "write error");
}

// Runs run(), which returns the exit code, as the whole of `name`'s main.
template <class Run> int run_program(ProgramName program, const char* name, const Run& run) {
  start_program(program);
  Ending ending;
  try {
    ending.code = ExitCode(run());
  } catch (...) {
    ending = ending_of_current_exception(failure_code(program));
  }
  if (const std::string failed = stdout_failure(); !failed.empty() && ending.message.empty())
    ending = {failure_code(program), failed};
  if (!ending.message.empty()) fmt::print(stderr, "{}: error: {}\n", name, ending.message);
  return exit_status(ending.code);
}

}  // namespace kpipe::apps
