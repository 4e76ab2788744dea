#include "kpipe/core/program_name.hpp"

#include <cerrno>  // program_invocation_short_name (GNU)

namespace kpipe {

std::string_view program_name() {
#ifdef __GLIBC__
  if (program_invocation_short_name && *program_invocation_short_name) return program_invocation_short_name;
#endif
  return "kpipe";
}

}  // namespace kpipe
