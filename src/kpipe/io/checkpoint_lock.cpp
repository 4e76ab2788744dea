#include "kpipe/io/checkpoint_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kpipe/core/error.hpp"

namespace kpipe::io {

namespace {

int try_lock(int fd) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
#ifdef F_OFD_SETLK
  // Owned by this open file description: not dropped when another descriptor of the file is closed in
  // this process, and it conflicts with a second lock taken within the same process (tests do that).
  return ::fcntl(fd, F_OFD_SETLK, &lock);
#else
  return ::fcntl(fd, F_SETLK, &lock);
#endif
}

std::string contents(int fd) {
  std::string text(512, '\0');
  const ssize_t got = ::pread(fd, text.data(), text.size(), 0);
  text.resize(got > 0 ? std::size_t(got) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& description)
    : path_((std::filesystem::path(dir) / lock_file).string()) {
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  require(fd >= 0, "checkpoint.dir = '{}': cannot create its lock file '{}' ({})", dir, path_, std::strerror(errno));
  if (try_lock(fd) == 0) {
    fd_ = fd;
    describe(description);
    return;
  }
  const int error = errno;
  if (error == EAGAIN || error == EACCES) {
    const std::string holder = contents(fd);
    ::close(fd);
    throw InputError(fmt::format("checkpoint.dir = '{}' is in use by another training ({}); two trainings must not "
                                 "share a checkpoint directory",
                                 dir, holder.empty() ? "its lock file is held" : holder));
  }
  ::close(fd);
  warning_ = fmt::format("checkpoint.dir = '{}': this file system does not lock files ({}): nothing stops a second "
                         "training from writing here",
                         dir, std::strerror(error));
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new holder)
}

void DirectoryLock::describe(const std::string& description) {
  if (fd_ < 0) return;
  const std::string text = description + "\n";
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, text.data(), text.size(), 0) == ssize_t(text.size())) return;
  // The description is only for another training's message: a failure to write it is not fatal.
}

}  // namespace kpipe::io
