// Training on a token file read by range (data/token_split.hpp): every layout reproduces one rank training
// on the same tokens in memory, bit for bit, and only the ranks that hold the first or the last stage read
// tokens; a middle stage never opens the file.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

#include "kpipe/data/token_file.hpp"
#include "support/mpi_world.hpp"
#include "support/training_run.hpp"

namespace kpipe {
namespace {

// A split that counts the reads it passes on.
class CountedTokens final : public data::TokenSource {
 public:
  CountedTokens(data::TokenSplit inner, std::shared_ptr<std::atomic<long>> reads)
      : inner_(std::move(inner)), reads_(std::move(reads)) {}
  std::int64_t size() const override { return inner_.size(); }
  void read(std::int64_t first, std::int64_t count, Token* out) const override {
    ++*reads_;
    inner_.read(first, count, out);
  }

 private:
  data::TokenSplit inner_;
  std::shared_ptr<std::atomic<long>> reads_;
};

// test::corpus() written as a token file by rank 0 into a directory every rank sees (one host), removed at
// the end.
class SharedTokenFile {
 public:
  SharedTokenFile() {
    path_ = (std::filesystem::temp_directory_path() /
             ("kpipe-test-token-reads-" + std::to_string(root_pid()) + ".h5")).string();
    if (test::world_rank() == 0) data::write_token_file(path_, test::corpus());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedTokenFile() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (test::world_rank() == 0) std::filesystem::remove(path_);
  }
  const std::string& path() const { return path_; }

 private:
  static long root_pid() {
    long pid = long(::getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return pid;
  }
  std::string path_;
};

TEST(TokenReads, ATokenFileTrainsLikeMemoryAndOnlyEndStagesRead) {
  const SharedTokenFile file;
  const int p = test::world_size();
  for (const std::string schedule : {"1f1b", "zb-v"}) {
    Config c = test::small_config(6, 4, 3);
    const test::TrainingRun reference = test::train(c, MPI_COMM_SELF);  // test::corpus(), in memory
    c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
    c.pipeline.chunks = schedule == "zb-v" ? 2 : 1;
    data::Corpus corpus = data::read_token_file(file.path());
    auto reads = std::make_shared<std::atomic<long>>(0);
    corpus.train = data::TokenSplit(std::make_shared<CountedTokens>(corpus.train, reads));
    corpus.validation = data::TokenSplit(std::make_shared<CountedTokens>(corpus.validation, reads));
    c.pipeline.pipeline_size = p;
    test::expect_identical(test::train(c, MPI_COMM_WORLD, {}, corpus), reference, schedule + " p=" + std::to_string(p));
    // 1f1b: the first stage is rank 0, the last rank p - 1; zb-v's V puts both ends on rank 0.
    const int rank = test::world_rank();
    const bool reads_tokens = rank == 0 || (schedule == "1f1b" && rank == p - 1);
    if (reads_tokens)
      EXPECT_GT(*reads, 0) << schedule << " rank " << rank;
    else
      EXPECT_EQ(*reads, 0) << schedule << " rank " << rank << " holds no end of the pipeline but read tokens";
  }
}

}  // namespace
}  // namespace kpipe
