#include "kpipe/core/files.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kpipe/core/error.hpp"

namespace kpipe {

std::string unreadable_reason(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return "is a directory";
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (in) return "";
  return errno != 0 ? std::strerror(errno) : "unreadable";
}

std::string read_bytes(const std::string& path, const std::string& label) {
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("{}: cannot open ({})", label, reason));
  std::ifstream in(path, std::ios::binary);
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw InputError(fmt::format("{}: read error", label));
  return bytes;
}

}  // namespace kpipe
