#pragma once
// The name every line a kpipe program writes to stderr starts with ("kpipe-train: ..."), also from the
// library's own lines (a resumed checkpoint, a lost peer): the name the program was started under.
#include <string_view>

namespace kpipe {

// "kpipe-train" for /opt/kpipe/bin/kpipe-train; "kpipe" when the C library does not say.
std::string_view program_name();

}  // namespace kpipe
