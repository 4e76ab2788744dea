#pragma once
// Reading input files and checking output paths, with the reason in words when that is impossible.
// Inputs are opened without blocking and must be regular files: a FIFO, a device, a socket or a directory
// given as --config, --data or a schedule file is refused, never opened for reading (open() on a FIFO
// with no writer would block forever). Outputs are never written over anything but a regular file.
#include <cstddef>
#include <string>

namespace kpipe {

// Why path cannot be read as an input file ("No such file or directory", "is a directory", "is a FIFO,
// not a regular file", ...), or "" when it can.
std::string unreadable_reason(const std::string& path);

// The whole file (or its first `limit` bytes); an InputError "<label>: cannot open (<reason>)" when
// unreadable.
std::string read_bytes(const std::string& path, const std::string& label, std::size_t limit = std::size_t(-1));

// Why a file cannot be written at path ("directory 'runs' does not exist", "is a character device, not a
// regular file", ...), or "" when it can: the path is absent or a regular file, in an existing, writable
// directory. Checked before any work, so that a bad output path fails at the start, not at the end.
std::string unwritable_reason(const std::string& path);

// InputError "<label>: cannot write (<reason>)" when unwritable_reason(path) is not "".
void require_writable(const std::string& path, const std::string& label);

// What kind of file system object path is, in words ("a directory", "a FIFO", "a character device", ...),
// "" when it is a regular file or does not exist.
std::string non_regular_kind(const std::string& path);

// Flushes a file's (or a directory's) contents to stable storage; throws std::system_error on failure
// (a directory on a file system that cannot fsync one, EINVAL, is not a failure).
void fsync_path(const std::string& path);

}  // namespace kpipe
