// Checkpoint write and read speeds beside the disk's own, on as many pipeline stages as MPI ranks: every rank
// writes its stages' tensors (values and both AdamW moments) into one step-<N>.h5 file, then every rank reads
// its own back. Each repeat first writes as many bytes with `dd if=/dev/zero bs=1M conv=fsync` into the same
// directory and reads them back with dd (the disk's own speeds, measured beside the checkpoint's), then writes
// the checkpoint while the caller waits (save_checkpoint), then beside it (io::CheckpointSaver: the copy into
// the snapshot buffer, then the write on a thread of its own), then reads it back. Write times include fsync
// and publication (rename, `latest`), not the pruning of older files, which runs beside what follows; read time
// includes verifying every byte read against the manifest and the loaded state's hash. Both
// reads come from the disk: the files' pages are dropped from the page cache first (posix_fadvise).
// MODEL: bench (the bench preset, 81 MB) or gigabyte (d_model 1024, 7 layers: 1.06 GB).
//   mpiexec -n 2 build/benchmarks/kpipe_bench_checkpoint [REPEAT] [DIR] [MODEL]
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config_io.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_saver.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace {

namespace fs = std::filesystem;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Drops a file's pages from the page cache (clean once fsynced): the next read comes from the disk.
void drop_cached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Disk {
  double write = -1, read = -1;  // seconds
};

// What `dd` takes to write `megabytes` MiB of zeros to a file in dir and fsync it, then to read it back.
Disk dd_seconds(const std::string& dir, long megabytes) {
  const std::string file = (fs::path(dir) / "dd.bin").string();
  Disk disk;
  double start = now();
  if (std::system(fmt::format("dd if=/dev/zero of='{}' bs=1M count={} conv=fsync 2>/dev/null", file, megabytes).c_str()) == 0)
    disk.write = now() - start;
  drop_cached(file);
  start = now();
  if (std::system(fmt::format("dd if='{}' of=/dev/null bs=1M 2>/dev/null", file).c_str()) == 0) disk.read = now() - start;
  fs::remove(file);
  return disk;
}

kpipe::Config model(const std::string& name, int ranks) {
  kpipe::Config c = kpipe::preset("bench");
  if (name == "gigabyte") {  // 88.4 M parameters: values and two moments, 1.06 GB
    c.model.d_model = 1024;
    c.model.n_heads = 16;
    c.model.n_layers = 7;
    c.model.seq_len = 32;
    c.train.batch = 2 * ranks;
  } else if (name != "bench") {
    throw kpipe::InputError(fmt::format("MODEL = {}: expected bench or gigabyte", name));
  }
  c.pipeline.pipeline_size = ranks;
  c.train.microbatches = ranks;
  c.data.synthetic_tokens = 1 << 16;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    Kokkos::ScopeGuard guard(argc, argv);
    const int repeat = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    const std::string dir = argc > 2 ? argv[2] : (fs::temp_directory_path() / "kpipe-bench-checkpoint").string();
    const std::string name = argc > 3 ? argv[3] : "bench";
    if (rank == 0) fs::remove_all(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    kpipe::Config c = model(name, size);
    c.checkpoint.dir = dir;
    c.checkpoint.keep = 2;
    c.checkpoint.async = kpipe::CheckpointAsync::on;
    const auto corpus = kpipe::data::synthetic_corpus(1, c.data.synthetic_tokens, 0.1);
    auto grid = kpipe::comm::make_grid(MPI_COMM_WORLD, size, 1);
    {
      kpipe::runtime::Trainer<float> trainer(c, corpus, grid);
      kpipe::io::CheckpointDir checkpoints(c.checkpoint, grid.world, c.pipeline.recv_timeout_s);
      checkpoints.start_run("");
      kpipe::io::CheckpointSaver<float, float> saver(trainer.stage(), corpus.tokenizer, checkpoints);
      std::vector<double> disk, disk_reads, waiting, snapshots, beside, reads;
      std::string path;
      std::int64_t bytes = 0;  // the checkpoint file's
      double copied = 0;       // this rank's snapshot bytes
      auto& stage = trainer.stage();
      const auto fail = [&](const kpipe::io::SaveResult& saved) {
        if (saved.ok) return;
        if (rank == 0) fmt::print(stderr, "kpipe_bench_checkpoint: {}\n", saved.message);
        MPI_Abort(MPI_COMM_WORLD, 1);
      };
      {  // a first write, not counted, for the file's size
        const auto first = kpipe::io::save_checkpoint(stage, 0, corpus.tokenizer, checkpoints);
        fail(first);
        bytes = std::int64_t(fs::file_size(first.path));
      }
      for (int i = 0; i < repeat; ++i) {
        // Each write's pruning of an older file runs beside what follows (CheckpointDir::start_pruning): done
        // before anything is timed, as a checkpoint interval leaves it done.
        checkpoints.wait_for_pruning();
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
          const Disk dd = dd_seconds(dir, long(bytes >> 20));
          disk.push_back(dd.write);
          disk_reads.push_back(dd.read);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t = now();
        const auto saved = kpipe::io::save_checkpoint(stage, 2 * i + 1, corpus.tokenizer, checkpoints);
        MPI_Barrier(MPI_COMM_WORLD);
        waiting.push_back(now() - t);
        fail(saved);
        checkpoints.wait_for_pruning();
        MPI_Barrier(MPI_COMM_WORLD);
        t = now();
        saver.start(2 * i + 2);
        const double snapshot = now() - t;
        const auto written = saver.finish();
        MPI_Barrier(MPI_COMM_WORLD);
        beside.push_back(now() - t);
        fail(written);
        for (const auto& span : saver.take_spans())
          if (span.kind == kpipe::io::CheckpointSpan::Kind::snapshot) copied = double(span.bytes);
        snapshots.push_back(snapshot);
        path = written.path;
        if (rank == 0) drop_cached(path);
        MPI_Barrier(MPI_COMM_WORLD);
        t = now();
        kpipe::io::load_checkpoint(stage, path);
        MPI_Barrier(MPI_COMM_WORLD);
        reads.push_back(now() - t);
      }
      if (rank == 0) {
        const double mb = double(bytes) / 1e6, dd_mb = double((bytes >> 20) << 20) / 1e6;
        const double disk_speed = dd_mb / median(disk);
        fmt::print("one checkpoint file, p = {}, {} model, {:.1f} MB, medians of {} repeats:\n", size, name, mb, repeat);
        fmt::print("  disk, dd bs=1M count={} conv=fsync: {:.3f} s, {:.0f} MB/s; read back (not cached): {:.3f} s, "
                   "{:.0f} MB/s\n",
                   bytes >> 20, median(disk), disk_speed, median(disk_reads), dd_mb / median(disk_reads));
        fmt::print("  written while the caller waits: {:.3f} s, {:.0f} MB/s ({:.0f}% of dd)\n", median(waiting),
                   mb / median(waiting), 100 * mb / median(waiting) / disk_speed);
        fmt::print("  written beside it: snapshot copy {:.3f} s ({:.1f} MB on rank 0, {:.2f} GB/s), then the write: "
                   "{:.3f} s in all, {:.0f} MB/s ({:.0f}% of dd)\n",
                   median(snapshots), copied / 1e6, copied / 1e9 / median(snapshots), median(beside),
                   mb / median(beside), 100 * mb / median(beside) / disk_speed);
        fmt::print("  read (not cached), every byte verified: {:.3f} s, {:.0f} MB/s ({:.0f}% of dd)\n", median(reads),
                   mb / median(reads), 100 * mb / median(reads) / (dd_mb / median(disk_reads)));
      }
    }
    kpipe::comm::free_grid(grid);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) fs::remove_all(dir);
  }
  MPI_Finalize();
  return 0;
}
