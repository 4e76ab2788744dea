#pragma once
// Reading whole files, with the reason in words when that is impossible.
#include <string>

namespace kpipe {

// Why path cannot be read ("No such file or directory", "is a directory", ...), or "" when it can.
std::string unreadable_reason(const std::string& path);

// The whole file; an InputError "<label>: cannot open (<reason>)" when unreadable.
std::string read_bytes(const std::string& path, const std::string& label);

}  // namespace kpipe
