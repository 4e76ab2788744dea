// A test shim, loaded with LD_PRELOAD, that makes the MPI library seem to provide less than it does:
//   KPIPE_MPI_THREAD_LEVEL  single, funneled or serialized: MPI_Init_thread and MPI_Query_thread report at
//                           most that level (an MPI built without MPI_THREAD_MULTIPLE)
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

static int ceiling(void) {
  const char* level = getenv("KPIPE_MPI_THREAD_LEVEL");
  if (!level || strcmp(level, "serialized") == 0) return MPI_THREAD_SERIALIZED;
  return strcmp(level, "single") == 0 ? MPI_THREAD_SINGLE : MPI_THREAD_FUNNELED;
}

static void lower(int* provided) {
  if (*provided > ceiling()) *provided = ceiling();
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  lower(provided);
  return rc;
}

int MPI_Query_thread(int* provided) {
  const int rc = PMPI_Query_thread(provided);
  lower(provided);
  return rc;
}
