#pragma once
// A directory every rank of the world names the same (a checkpoint.dir for the MPI tests), removed at the end.
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/mpi_world.hpp"

namespace kpipe::test {

struct SharedDir {
  SharedDir() {
    std::string name;
    if (world_rank() == 0)
      name = (std::filesystem::temp_directory_path() / ("kpipe-test-ckpt-" + std::to_string(::getpid()))).string();
    int size = int(name.size());
    MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
    name.resize(std::size_t(size));
    MPI_Bcast(name.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);
    path = name;
    if (world_rank() == 0) std::filesystem::create_directories(path);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::filesystem::remove_all(path);
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  std::string path;
};

}  // namespace kpipe::test
