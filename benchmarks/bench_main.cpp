// Google Benchmark main for kpipe: MPI (single process), then Kokkos.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  ::benchmark::Initialize(&argc, argv);
  ::benchmark::RunSpecifiedBenchmarks();
  ::benchmark::Shutdown();
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
