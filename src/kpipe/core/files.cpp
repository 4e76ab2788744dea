#include "kpipe/core/files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "kpipe/core/error.hpp"

namespace kpipe {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string refusal(const std::string& kind) {
  return kind == "a directory" ? "is a directory" : fmt::format("is {}, not a regular file", kind);
}

// An open file descriptor that closes itself.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens path for reading without blocking (O_NONBLOCK: a FIFO or a device would otherwise wait) after
// checking, and checking again on the descriptor, that it is a regular file. "" or the reason.
std::string open_input(const std::string& path, Fd& file) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::strerror(errno);
  if (const std::string kind = kind_of(info.st_mode); !kind.empty()) return refusal(kind);
  file.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (file.fd < 0) return std::strerror(errno);
  if (::fstat(file.fd, &info) != 0) return std::strerror(errno);
  if (const std::string kind = kind_of(info.st_mode); !kind.empty()) return refusal(kind);  // replaced meanwhile
  const int flags = ::fcntl(file.fd, F_GETFL);
  if (flags >= 0) ::fcntl(file.fd, F_SETFL, flags & ~O_NONBLOCK);
  return "";
}

}  // namespace

std::string non_regular_kind(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return "";
  return kind_of(info.st_mode);
}

std::string unreadable_reason(const std::string& path) {
  Fd file;
  return open_input(path, file);
}

std::string read_bytes(const std::string& path, const std::string& label, std::size_t limit) {
  Fd file;
  if (const std::string reason = open_input(path, file); !reason.empty())
    throw InputError(fmt::format("{}: cannot open ({})", label, reason));
  std::string bytes;
  char buffer[1 << 16];
  while (bytes.size() < limit) {
    const ssize_t got = ::read(file.fd, buffer, std::min(sizeof buffer, limit - bytes.size()));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(fmt::format("{}: read error ({})", label, std::strerror(errno)));
    if (got == 0) break;
    bytes.append(buffer, std::size_t(got));
  }
  return bytes;
}

std::string unwritable_reason(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return "empty path";
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    if (const std::string kind = kind_of(info.st_mode); !kind.empty()) return refusal(kind);
    if (::access(path.c_str(), W_OK) != 0) return std::strerror(errno);
  } else if (errno != ENOENT) {
    return std::strerror(errno);
  }
  std::string parent = fs::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  if (::stat(parent.c_str(), &info) != 0) return fmt::format("directory '{}': {}", parent, std::strerror(errno));
  if (!S_ISDIR(info.st_mode)) return fmt::format("'{}' is not a directory", parent);
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    return fmt::format("directory '{}' is not writable ({})", parent, std::strerror(errno));
  return "";
}

void require_writable(const std::string& path, const std::string& label) {
  if (const std::string reason = unwritable_reason(path); !reason.empty())
    throw InputError(fmt::format("{}: cannot write ({})", label, reason));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0 && error != EINVAL) throw std::system_error(error, std::generic_category(), "fsync " + path);
}

}  // namespace kpipe
