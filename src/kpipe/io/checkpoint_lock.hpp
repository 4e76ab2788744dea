#pragma once
// One training per checkpoint directory. World rank 0 holds a lock on <checkpoint.dir>/lock for the whole
// run: an open-file-description lock (fcntl F_OFD_SETLK; F_SETLK where that is missing), which the kernel
// drops when the process ends however it ends, so a killed or requeued job never leaves a stale lock
// behind. The file itself says who holds it (pid, host, run, since when) for the message a second training
// gets. Where the file system has no locks (ENOLCK, ENOSYS, EOPNOTSUPP: some parallel file systems mounted
// without them) the lock is skipped with a warning: publication stays safe without it (each checkpoint is
// one file renamed into place, so a checkpoint is whole or absent), only `latest` could then name the other
// training's newest.
#include <string>

namespace kpipe::io {

class DirectoryLock {
 public:
  // Takes the lock in dir (which exists). InputError naming the holder when another process holds it.
  DirectoryLock(const std::string& dir, const std::string& description);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  bool held() const { return fd_ >= 0; }
  // Why the lock could not be taken on this file system ("" when held).
  const std::string& warning() const { return warning_; }
  // Rewrites the description (the run's id is known only after resuming).
  void describe(const std::string& description);

 private:
  std::string path_;
  int fd_ = -1;
  std::string warning_;
};

inline constexpr const char* lock_file = "lock";

}  // namespace kpipe::io
