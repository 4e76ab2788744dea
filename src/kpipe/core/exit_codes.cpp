#include "kpipe/core/exit_codes.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace kpipe {

void abort_job(ExitCode code, const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_status(code));
  std::_Exit(exit_status(code));
}

}  // namespace kpipe
