// Checkpoint write and read times of the bench preset on as many pipeline stages as MPI ranks: every rank
// writes its stages' tensors (values and both AdamW moments) into one step-<N>.h5 file, then every rank
// reads its own back. Write time includes fsync and publication (rename, `latest`); read time includes
// verifying every byte read against the manifest. Reads come from the page cache (the file was just
// written): they measure kpipe's side, not the disk.
//   mpiexec -n 4 build/benchmarks/kpipe_bench_checkpoint [REPEAT] [DIR]
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace {

namespace fs = std::filesystem;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    Kokkos::ScopeGuard guard(argc, argv);
    const int repeat = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    const std::string dir = argc > 2 ? argv[2] : (fs::temp_directory_path() / "kpipe-bench-checkpoint").string();
    if (rank == 0) fs::remove_all(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    kpipe::Config c = kpipe::preset("bench");
    c.pipeline.pipeline_size = size;
    c.train.microbatches = size;
    c.data.synthetic_tokens = 1 << 16;
    c.checkpoint.dir = dir;
    c.checkpoint.keep = 2;
    const auto corpus = kpipe::data::synthetic_corpus(1, c.data.synthetic_tokens, 0.1);
    auto grid = kpipe::comm::make_grid(MPI_COMM_WORLD, size, 1);
    {
      kpipe::runtime::Trainer<float> trainer(c, corpus, grid);
      kpipe::io::CheckpointDir checkpoints(c.checkpoint, grid.world, c.pipeline.recv_timeout_s);
      checkpoints.start_run("");
      std::vector<double> writes, reads;
      std::string path;
      auto& stage = trainer.stage();
      for (int i = 0; i < repeat; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = now();
        const auto saved = kpipe::io::save_checkpoint(stage, i + 1, corpus.tokenizer, checkpoints);
        MPI_Barrier(MPI_COMM_WORLD);
        writes.push_back(now() - t);
        if (!saved.ok) {
          if (rank == 0) fmt::print(stderr, "kpipe_bench_checkpoint: {}\n", saved.message);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        path = saved.path;
        t = now();
        kpipe::io::load_checkpoint(stage, path);
        MPI_Barrier(MPI_COMM_WORLD);
        reads.push_back(now() - t);
      }
      if (rank == 0) {
        const double mb = double(fs::file_size(path)) / 1e6;
        fmt::print("one checkpoint file, p = {}, bench preset, {:.1f} MB: write median {:.3f} s (min {:.3f}, {:.0f} MB/s), "
                   "read median {:.3f} s (min {:.3f}) over {} repeats\n",
                   size, mb, median(writes), *std::min_element(writes.begin(), writes.end()), mb / median(writes),
                   median(reads), *std::min_element(reads.begin(), reads.end()), repeat);
      }
    }
    kpipe::comm::free_grid(grid);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) fs::remove_all(dir);
  }
  MPI_Finalize();
  return 0;
}
