// Checkpoints across ranks (run with -n 1, 2 and 4): resuming continues bit for bit, on the same layout
// and on another one (resharding to fewer ranks, another schedule, another chunk count); the checkpoint
// file API with every rank writing its own share; failures agreed by every rank; checkpoints written beside
// the training: their snapshot buffer as the memory plan predicts, their files as a waiting save writes them.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/io/checkpoint_saver.hpp"
#include "kpipe/memory/meter.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/runtime/trainer.hpp"

#include "support/checkpointing.hpp"
#include "support/corpus.hpp"
#include "support/mpi_world.hpp"
#include "support/shared_dir.hpp"

namespace kpipe {
namespace {

using test::world_size;

namespace fs = std::filesystem;

using test::SharedDir;
using test::world_rank;

Config config(int pipeline_size, const std::string& schedule, int chunks) {
  Config c;
  c.model.seq_len = 8;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 6;
  c.train.batch = 8;
  c.train.microbatches = 4;
  c.train.steps = 6;  // the lr schedule of every run below spans the same 6 steps
  c.optim.warmup_steps = 2;
  c.pipeline.pipeline_size = pipeline_size;
  c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
  c.pipeline.chunks = chunks;
  return c;
}

struct Segment {
  std::vector<double> losses;
  std::uint64_t checksum = 0;
};

// On comm: optionally load `from`, run `steps` steps, optionally save into `to`. A: activations' storage
// (float, or bf16 for train.precision = bf16). `loaded_checksum`, when given, gets the checksum right after the
// load.
template <class A = float>
Segment run(const Config& c, MPI_Comm comm, const std::string& from, int steps, const std::string& to,
            std::uint64_t* loaded_checksum = nullptr) {
  auto grid = comm::make_grid(comm, c.pipeline.pipeline_size, c.pipeline.data_parallel);
  Segment out;
  {
    runtime::Trainer<float, A> trainer(c, test::corpus(), grid);
    if (!from.empty()) test::load(trainer, from);
    if (loaded_checksum) *loaded_checksum = trainer.param_checksum();
    for (int s = 0; s < steps; ++s) out.losses.push_back(trainer.step().loss);
    if (!to.empty()) {
      CheckpointConfig cc;
      cc.dir = to;
      cc.keep = 2;
      io::CheckpointDir dir(cc, comm, c.pipeline.recv_timeout_s);
      dir.start_run("");
      const io::SaveResult saved = test::save(trainer, dir);
      EXPECT_TRUE(saved.ok) << saved.message;
    }
    out.checksum = trainer.param_checksum();
  }
  comm::free_grid(grid);
  return out;
}

void expect_continues(const Segment& first, const Segment& second, const Segment& straight, const std::string& what) {
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  ASSERT_EQ(joined.size(), straight.losses.size()) << what;
  for (std::size_t s = 0; s < joined.size(); ++s) EXPECT_EQ(joined[s], straight.losses[s]) << what << " step " << s;
  EXPECT_EQ(second.checksum, straight.checksum) << what;
}

TEST(CheckpointMpi, ResumeOnTheSameLayoutIsBitExact) {
  SharedDir dir;
  const Config c = config(world_size(), "1f1b", 1);
  const Segment straight = run(c, MPI_COMM_WORLD, "", 6, "");
  const Segment first = run(c, MPI_COMM_WORLD, "", 3, dir.path);
  const Segment second = run(c, MPI_COMM_WORLD, dir.path + "/step-00000003.h5", 3, "");
  expect_continues(first, second, straight, "same layout");
}

// bf16 runs checkpoint their fp32 masters and moments: a resumed bf16 run continues bit for bit (its compute
// copy is rounded again from the masters, as it was before the checkpoint), on the same layout and on one rank.
TEST(CheckpointMpi, Bf16ResumeIsBitExact) {
  SharedDir dir;
  Config c = config(world_size(), "1f1b", 1);
  c.train.precision = Precision::bf16;
  const Segment straight = run<bf16>(c, MPI_COMM_WORLD, "", 6, "");
  const Segment first = run<bf16>(c, MPI_COMM_WORLD, "", 3, dir.path);
  const Segment second = run<bf16>(c, MPI_COMM_WORLD, dir.path + "/step-00000003.h5", 3, "");
  expect_continues(first, second, straight, "bf16 same layout");
  Config one = c;
  one.pipeline.pipeline_size = 1;
  const Segment alone = run<bf16>(one, MPI_COMM_SELF, dir.path + "/step-00000003.h5", 3, "");
  expect_continues(first, alone, straight, "bf16 -> one rank");
}

// A checkpoint holds the masters whatever the run computed in: one written by an fp32 run loads into a bf16 run
// (and the other way) with the very same weights; from there each continues in its own precision.
TEST(CheckpointMpi, ACheckpointLoadsAtAnotherPrecision) {
  SharedDir dir;
  Config c = config(world_size(), "1f1b", 1);
  const Segment fp32 = run(c, MPI_COMM_WORLD, "", 3, dir.path + "/fp32");
  c.train.precision = Precision::bf16;
  std::uint64_t loaded = 0;
  const Segment bf16_run = run<bf16>(c, MPI_COMM_WORLD, dir.path + "/fp32/step-00000003.h5", 1, dir.path + "/bf16",
                                     &loaded);
  EXPECT_EQ(loaded, fp32.checksum) << "the bf16 run starts from the fp32 run's masters";
  EXPECT_TRUE(std::isfinite(bf16_run.losses.front()));
  c.train.precision = Precision::fp32;
  const Segment back = run(c, MPI_COMM_WORLD, dir.path + "/bf16/step-00000004.h5", 0, "", &loaded);
  EXPECT_EQ(loaded, bf16_run.checksum) << "and an fp32 run from the bf16 run's";
}

TEST(CheckpointMpi, ReshardedToOneRankContinuesAsThatLayoutWould) {
  SharedDir dir;
  const Config wide = config(world_size(), "gpipe", 1);
  const Config one = config(1, "1f1b", 1);
  const Segment straight = run(one, MPI_COMM_SELF, "", 6, "");
  const Segment first = run(wide, MPI_COMM_WORLD, "", 2, dir.path);
  // Every rank loads the world's checkpoint alone.
  const Segment second = run(one, MPI_COMM_SELF, dir.path + "/step-00000002.h5", 4, "");
  expect_continues(first, second, straight, "p=" + std::to_string(world_size()) + " -> 1");
}

TEST(CheckpointMpi, ReshardFourToTwoToOneWithScheduleChanges) {
  SharedDir dir;
  const int n = world_size();
  const int half = std::max(1, n / 2);
  const Segment straight = run(config(1, "interleaved", 2), MPI_COMM_SELF, "", 6, "");
  const Segment a = run(config(n, "zb-h1", 1), MPI_COMM_WORLD, "", 2, dir.path + "/a");
  // The lower half of the world continues on half as many stages with interleaved chunks.
  MPI_Comm lower;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < half ? 0 : MPI_UNDEFINED, world_rank(), &lower);
  Segment b;
  if (lower != MPI_COMM_NULL) {
    b = run(config(half, "interleaved", 2), lower, dir.path + "/a/step-00000002.h5", 2, dir.path + "/b");
    MPI_Comm_free(&lower);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const Segment c = run(config(1, "interleaved", 2), MPI_COMM_SELF, dir.path + "/b/step-00000004.h5", 2, "");
  if (world_rank() < half) {
    Segment ab = a;
    ab.losses.insert(ab.losses.end(), b.losses.begin(), b.losses.end());
    expect_continues(ab, c, straight, "4 -> 2 -> 1");
  }
}

TEST(CheckpointMpi, AModelMismatchFailsOnEveryRankAlike) {
  SharedDir dir;
  run(config(world_size(), "1f1b", 1), MPI_COMM_WORLD, "", 1, dir.path);
  Config other = config(world_size(), "1f1b", 1);
  other.model.d_model = 32;
  std::string message;
  try {
    run(other, MPI_COMM_WORLD, dir.path, 1, "");
  } catch (const InputError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("[256, 16]"), std::string::npos) << message;  // every rank, not just the one that read it
  EXPECT_NE(message.find("[256, 32]"), std::string::npos) << message;
}


// checkpoint.fallback = "previous" checks every dataset's bytes before the run is planned, each rank a share:
// damage in a dataset another rank than 0 checks is found all the same, and every rank falls back alike; the
// same checkpoint intact is chosen (the share's check flags nothing intact).
TEST(CheckpointMpi, TheFallbackFindsDamageInAnyRanksShare) {
  SharedDir dir;
  const int size = world_size();
  const Config c = config(size, "1f1b", 1);
  auto grid = comm::make_grid(MPI_COMM_WORLD, c.pipeline.pipeline_size, c.pipeline.data_parallel);
  {
    runtime::Trainer<float> trainer(c, test::corpus(), grid);
    CheckpointConfig cc;
    cc.dir = dir.path;
    io::CheckpointDir checkpoints(cc, MPI_COMM_WORLD, 30);
    checkpoints.start_run("");
    for (int k = 0; k < 2; ++k) {
      trainer.step();
      const io::SaveResult saved = test::save(trainer, checkpoints);
      ASSERT_TRUE(saved.ok) << saved.message;
    }
  }
  comm::free_grid(grid);
  CheckpointConfig resume;
  resume.dir = dir.path;
  resume.resume = "latest";
  resume.fallback = CheckpointFallback::previous;
  EXPECT_EQ(io::choose_resume_point(resume, MPI_COMM_WORLD, 30).step, 2) << "intact";
  // A tensor of the last rank's share (datasets in name order, dealt out round robin) damaged in place.
  const std::string newest = dir.path + "/step-00000002.h5";
  std::string victim;
  if (world_rank() == 0) {
    {
      const io::CheckpointReader reader(newest);
      const auto& datasets = reader.datasets();
      for (std::size_t i = 0; i < datasets.size() && victim.empty(); ++i)
        if (int(i) % size == size - 1 && datasets[i].name.rfind("/model/", 0) == 0) victim = datasets[i].name;
    }
    test::damage_tensor(newest, victim);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const io::ResumePoint point = io::choose_resume_point(resume, MPI_COMM_WORLD, 30);
  EXPECT_EQ(point.step, 1) << "damage in " << victim << ", rank " << size - 1 << "'s share";
  EXPECT_EQ(fs::path(point.path).filename(), "step-00000001.h5");
  resume.fallback = CheckpointFallback::error;
  EXPECT_EQ(io::choose_resume_point(resume, MPI_COMM_WORLD, 30).step, 2) << "without the fallback, only metadata";
}

TEST(CheckpointMpi, EveryRankWritesItsShareOfOneFileAndReadsAnyShareBack) {
  SharedDir dir;
  const int rank = world_rank(), size = world_size();
  const std::string path = dir.path + "/shares.h5";
  std::vector<float> mine(100 + rank);
  for (std::size_t k = 0; k < mine.size(); ++k) mine[k] = float(rank * 1000 + int(k));
  {
    io::CheckpointWriter writer(MPI_COMM_WORLD, 60);
    writer.add_tensor("/ranks/" + std::to_string(rank), {std::int64_t(mine.size())}, mine.data());
    if (rank == 0) writer.add_blob("/blob", "from rank 0");
    writer.set_attribute("/", "ranks", std::int64_t(size));
    const io::WriteStatus status = writer.write(path);
    ASSERT_TRUE(status.ok) << status.message;
  }
  // Every rank reads every share, verified.
  const io::CheckpointReader reader(path);
  EXPECT_EQ(reader.number("ranks"), size);
  EXPECT_EQ(reader.read_blob("/blob"), "from rank 0");
  for (int r = 0; r < size; ++r) {
    std::vector<float> back(std::size_t(100 + r));
    reader.read_tensor("/ranks/" + std::to_string(r), {std::int64_t(back.size())}, back.data());
    EXPECT_EQ(back[0], float(r * 1000));
    EXPECT_EQ(back.back(), float(r * 1000 + int(back.size()) - 1));
  }
}

TEST(CheckpointMpi, AWriteThatFailsOnOneRankFailsOnEveryRankNamingIt) {
  SharedDir dir;
  const int rank = world_rank(), size = world_size();
  // The last rank's share is a blob whose name cannot be a dataset (a group of that name exists already):
  // creating the layout fails, and every rank reports the same failure.
  const float x = 1;
  io::CheckpointWriter writer(MPI_COMM_WORLD, 60);
  writer.add_tensor("/t/" + std::to_string(rank) + "/x", {1}, &x);
  if (rank == size - 1) writer.add_blob("/t/0", "clash");
  const io::WriteStatus status = writer.write(dir.path + "/clash.h5");
  EXPECT_FALSE(status.ok);
  EXPECT_EQ(status.rank, 0);  // rank 0 creates the layout
  EXPECT_NE(status.message.find("/t/0"), std::string::npos) << status.message;
}

// Checkpoints beside the training. `replicas`: data-parallel replicas of a pipeline over the rest of the world.
Config beside_the_training(const std::string& schedule, int replicas, const std::string& dir) {
  Config c = config(world_size() / replicas, schedule, schedule == "zb-v" ? 2 : 1);
  c.pipeline.data_parallel = replicas;
  c.train.batch *= replicas;
  c.train.microbatches *= replicas;
  c.checkpoint.dir = dir;
  c.checkpoint.async = CheckpointAsync::on;
  return c;
}

// The snapshot buffer is a category of the memory plan: predicted = measured on every rank, with the rest,
// after a checkpoint written beside the training: replica 0's ranks hold each chunk's weights, both moments and
// (pipedream) the older versions a checkpoint holds; the other replicas write nothing and hold none.
TEST(CheckpointSaver, TheSnapshotBufferIsAsThePlanPredicts) {
  SharedDir shared;
  std::vector<std::pair<std::string, int>> layouts = {{"1f1b", 1}, {"zb-v", 1}, {"pipedream", 1}};
  if (world_size() == 4) layouts.push_back({"pipedream", 2});
  for (const auto& [schedule, replicas] : layouts) {
    const std::string what = schedule + " x " + std::to_string(replicas);
    const Config c = beside_the_training(schedule, replicas, shared.path + "/" + schedule + std::to_string(replicas));
    auto grid = comm::make_grid(MPI_COMM_WORLD, c.pipeline.pipeline_size, c.pipeline.data_parallel);
    {
      memory::Meter meter;
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
      io::CheckpointDir dir(c.checkpoint, grid.world, c.pipeline.recv_timeout_s);
      dir.start_run("");
      io::CheckpointSaver<float, float> saver(trainer.stage(), test::corpus().tokenizer, dir);
      ASSERT_TRUE(saver.background()) << what;
      for (int s = 0; s < 3; ++s) trainer.step();
      saver.start(trainer.next_step());
      for (int s = 3; s < c.train.steps; ++s) trainer.step();
      EXPECT_TRUE(saver.finish().ok) << what;
      trainer.evaluate();
      const auto plan = memory::plan_rank(trainer.config(), trainer.desc(), trainer.plan().schedule, grid.replica, grid.stage);
      EXPECT_EQ(meter.peak(), plan.bytes) << what << " rank " << grid.world_rank;
      const std::int64_t snapshot = meter.peak()[int(memory::Category::snapshot)];
      EXPECT_EQ(snapshot > 0, grid.replica == 0) << what << " rank " << grid.world_rank << ": " << snapshot;
    }
    comm::free_grid(grid);
  }
}

// What a write beside the training publishes is what a save while the training waits writes at that step, byte
// for byte, although the training changes the model while it is written.
TEST(CheckpointSaver, BesideTheTrainingWritesWhatAWaitingSaveWrites) {
  SharedDir shared;
  for (const std::string schedule : {"1f1b", "pipedream"}) {
    const Config c = beside_the_training(schedule, 1, shared.path + "/beside-" + schedule);
    CheckpointConfig waiting = c.checkpoint;
    waiting.dir += "-waiting";
    auto grid = comm::make_grid(MPI_COMM_WORLD, c.pipeline.pipeline_size, c.pipeline.data_parallel);
    std::string beside_file, waiting_file;
    {
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
      io::CheckpointDir beside_dir(c.checkpoint, grid.world, c.pipeline.recv_timeout_s), waiting_dir(waiting, grid.world, 60);
      beside_dir.start_run("");
      waiting_dir.start_run("");
      io::CheckpointSaver<float, float> saver(trainer.stage(), test::corpus().tokenizer, beside_dir);
      for (int s = 0; s < 3; ++s) trainer.step();
      waiting_file = test::save(trainer, waiting_dir).path;
      saver.start(trainer.next_step());
      for (int s = 3; s < c.train.steps; ++s) trainer.step();
      const io::SaveResult beside = saver.finish();
      ASSERT_TRUE(beside.ok) << beside.message;
      beside_file = beside.path;
    }
    comm::free_grid(grid);
    if (world_rank() != 0) continue;
    const io::CheckpointReader a(waiting_file), b(beside_file);
    ASSERT_EQ(a.datasets().size(), b.datasets().size()) << schedule;
    for (std::size_t k = 0; k < a.datasets().size(); ++k) {
      EXPECT_EQ(a.datasets()[k].name, b.datasets()[k].name) << schedule;
      EXPECT_EQ(a.datasets()[k].hash, b.datasets()[k].hash) << schedule << " " << a.datasets()[k].name;
    }
    EXPECT_EQ(a.number("step"), 3);
    EXPECT_EQ(b.number("step"), 3);
  }
}

}  // namespace
}  // namespace kpipe
