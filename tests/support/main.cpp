// gtest main for every kpipe test: HDF5 as kpipe's programs start it (h5/file.hpp), MPI (at the thread level
// kpipe-train asks for: checkpoints written beside the training), then Kokkos, torn down in reverse order.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "kpipe/h5/file.hpp"

int main(int argc, char** argv) {
  kpipe::h5::start_for_program();
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Kokkos::initialize(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    // Only rank 0 prints; every rank still runs (and fails) every test.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Kokkos::finalize();
  MPI_Finalize();
  return worst;
}
