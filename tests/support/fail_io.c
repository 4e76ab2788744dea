// A test shim, loaded with LD_PRELOAD, that makes the file system fail for chosen files in chosen
// processes, the way a full disk (ENOSPC) or a failing device (EIO) does:
//   KPIPE_FAIL_IO_PATH   substring of the path: files opened under a matching name fail (required)
//   KPIPE_FAIL_IO_ERRNO  ENOSPC (default) or EIO
//   KPIPE_FAIL_IO_CALL   write (default: write, pwrite, writev, pwritev fail) or fsync (fsync, fdatasync)
//   KPIPE_FAIL_IO_RANK   only in the MPI process of this world rank (OMPI_COMM_WORLD_RANK, PMIX_RANK,
//                        PMI_RANK or SLURM_PROCID); unset: in every process
//   KPIPE_FAIL_IO_SLOW_S instead of failing, the first write to each matching file waits this many seconds
//                        (a slow disk: a test acts, or kills the job, while a checkpoint is half written), saying so on stderr
// A write fails before writing anything, as write() does on a full file system.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 65536
static unsigned char failing[MAX_FDS];

static const char* env(const char* name) {
  const char* value = getenv(name);
  return value && *value ? value : NULL;
}

static int active_here(void) {
  const char* rank = env("KPIPE_FAIL_IO_RANK");
  if (!rank) return 1;
  const char* names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (unsigned i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const char* mine = env(names[i]);
    if (mine) return strcmp(mine, rank) == 0;
  }
  return 0;
}

static int matches(const char* path) {
  const char* pattern = env("KPIPE_FAIL_IO_PATH");
  if (!path || !pattern || !strstr(path, pattern) || !active_here()) return 0;
  // Not the MPI library's own files named after it (Open MPI's shared-file-pointer file, "<name>...sm",
  // lives in the job's session directory, not on the file system that fills up).
  const size_t n = strlen(path);
  return !(n > 3 && strcmp(path + n - 3, ".sm") == 0);
}

static int error_number(void) {
  const char* name = env("KPIPE_FAIL_IO_ERRNO");
  return name && strcmp(name, "EIO") == 0 ? EIO : ENOSPC;
}

static unsigned char slowed[MAX_FDS];

static double slow_seconds(void) {
  const char* value = env("KPIPE_FAIL_IO_SLOW_S");
  return value ? atof(value) : 0;
}

static int fails(int fd, const char* call) {
  const char* which = env("KPIPE_FAIL_IO_CALL");
  if (!which) which = "write";
  if (fd < 0 || fd >= MAX_FDS || !failing[fd]) return 0;
  const double slow = slow_seconds();
  if (slow > 0) {  // a slow disk: the file's first write waits, nothing fails
    if (strcmp(call, "write") == 0 && !slowed[fd]) {
      slowed[fd] = 1;
      fprintf(stderr, "fail_io: pid %d: a write to a file matching '%s' waits %g s\n", (int)getpid(),
              env("KPIPE_FAIL_IO_PATH"), slow);
      const struct timespec wait = {(time_t)slow, (long)((slow - (double)(time_t)slow) * 1e9)};
      nanosleep(&wait, NULL);
    }
    return 0;
  }
  if (strcmp(which, call) != 0) return 0;
  errno = error_number();
  return 1;
}

static void track(int fd, const char* path) {
  if (fd >= 0 && fd < MAX_FDS) {
    failing[fd] = (unsigned char)matches(path);
    slowed[fd] = 0;
  }
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
  va_end(args);
  const int fd = NEXT(open)(path, flags, mode);
  track(fd, path);
  return fd;
}

int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
  va_end(args);
  const int fd = NEXT(open64)(path, flags, mode);
  track(fd, path);
  return fd;
}

int openat(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
  va_end(args);
  const int fd = NEXT(openat)(dir, path, flags, mode);
  track(fd, path);
  return fd;
}

// C's and C++'s streams (std::ofstream opens with fopen, whose own open() the C library calls internally).
FILE* fopen(const char* path, const char* mode) {
  FILE* file = NEXT(fopen)(path, mode);
  if (file) track(fileno(file), path);
  return file;
}

FILE* fopen64(const char* path, const char* mode) {
  FILE* file = NEXT(fopen64)(path, mode);
  if (file) track(fileno(file), path);
  return file;
}

int close(int fd) {
  if (fd >= 0 && fd < MAX_FDS) failing[fd] = slowed[fd] = 0;
  return NEXT(close)(fd);
}

ssize_t write(int fd, const void* data, size_t bytes) {
  return fails(fd, "write") ? -1 : NEXT(write)(fd, data, bytes);
}

ssize_t pwrite(int fd, const void* data, size_t bytes, off_t offset) {
  return fails(fd, "write") ? -1 : NEXT(pwrite)(fd, data, bytes, offset);
}

ssize_t pwrite64(int fd, const void* data, size_t bytes, off64_t offset) {
  return fails(fd, "write") ? -1 : NEXT(pwrite64)(fd, data, bytes, offset);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  return fails(fd, "write") ? -1 : NEXT(writev)(fd, iov, count);
}

ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  return fails(fd, "write") ? -1 : NEXT(pwritev)(fd, iov, count, offset);
}

int fsync(int fd) { return fails(fd, "fsync") ? -1 : NEXT(fsync)(fd); }

int fdatasync(int fd) { return fails(fd, "fsync") ? -1 : NEXT(fdatasync)(fd); }
