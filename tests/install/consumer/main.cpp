// Describes the bench model and initializes a chunk of it: proves headers, library and dependencies
// all come through find_package(kpipe).
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>

#include "kpipe/model/chunk.hpp"
#include "kpipe/version.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 1;
  {
    Kokkos::ScopeGuard guard(argc, argv);
    kpipe::ModelConfig config;
    const auto desc = kpipe::model::describe(config);
    kpipe::model::Chunk<float> chunk(desc, 0, int(desc.layers.size()), 1);
    chunk.params().initialize(kpipe::ExecSpace(), 1);
    std::printf("kpipe %s: %lld parameters\n", kpipe::version, static_cast<long long>(desc.num_params()));
    rc = chunk.params().size() == desc.num_params() ? 0 : 1;
  }
  MPI_Finalize();
  return rc;
}
