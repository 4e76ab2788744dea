// Silent data corruption caught by determinism (runtime/replica_check.hpp, runtime/corruption_checks.hpp), on 6
// ranks: 3 replicas x 2 stages (the world) and 2 replicas x 2 stages (its first 4 ranks). A bit flipped in one
// replica's weights, or in the gradient sum as one replica received it (support/reduced_gradient_fault.hpp), is
// found at the next check naming the right ranks; nothing that disagrees is checkpointed; `latest` loads, its
// recorded hash verified, and a resumed run without the fault ends as the uninterrupted one; a checkpoint whose
// tensors do not hash to what it recorded is refused on load; a forward whose bytes differ when computed again is
// found by the recomputation check.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/runtime/corruption_checks.hpp"
#include "kpipe/runtime/trainer.hpp"

#include "support/checkpointing.hpp"
#include "support/corpus.hpp"
#include "support/mpi_world.hpp"
#include "support/reduced_gradient_fault.hpp"
#include "support/shared_dir.hpp"

namespace kpipe {
namespace {

namespace fs = std::filesystem;
using test::world_rank;

constexpr int stages = 2;

// 2 blocks on 2 stages; 6 micro-batches, so that 2 and 3 replicas share them out.
Config config(int replicas, int steps) {
  Config c = test::small_config(2, 6, steps);
  c.train.batch = 12;
  c.pipeline.pipeline_size = stages;
  c.pipeline.data_parallel = replicas;
  return c;
}

// The world's first `ranks` ranks (MPI_COMM_NULL on the others), freed at the end.
struct Ranks {
  explicit Ranks(int ranks) {
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &comm);
  }
  ~Ranks() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
  MPI_Comm comm = MPI_COMM_NULL;
};

// Bit `bit` of element `element` of chunk 0's weights, flipped in place on the device.
void flip_weight(runtime::Trainer<float>& trainer, std::int64_t element, int bit) {
  const auto value = Kokkos::subview(trainer.stage().chunk(0).params().values(), element);
  float x = 0;
  Kokkos::deep_copy(x, value);
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits ^= 1u << bit;
  std::memcpy(&x, &bits, sizeof bits);
  Kokkos::deep_copy(value, x);
}

struct Found {
  std::int64_t step = -1;  // 0-based: the step after which the checks found it
  runtime::SilentCorruption corruption;
};

// Trains `c` on `comm` as kpipe-train's loop does (the checks at every step boundary); `fault(trainer, step)`
// runs on every rank after each step's update, before the checks. Stops at the first finding.
template <class Fault>
std::optional<Found> train_until_found(const Config& c, MPI_Comm comm, const Fault& fault) {
  auto grid = comm::make_grid(comm, c.pipeline.pipeline_size, c.pipeline.data_parallel);
  std::optional<Found> found;
  {
    runtime::Trainer<float> trainer(c, test::corpus(), grid);
    runtime::CorruptionChecks<float, float> checks(trainer.stage());
    for (int s = 0; s < c.train.steps && !found; ++s) {
      checks.before_step(s);
      trainer.step();
      fault(trainer, s);
      if (auto corruption = checks.after_step(s, false)) found = Found{s, *corruption};
    }
  }
  comm::free_grid(grid);
  return found;
}

// Replica `replica`'s rank of stage `stage`, in the comm's numbering (the world's for its first ranks).
int rank_of(int replica, int stage) { return replica * stages + stage; }

TEST(SilentCorruption, AFlippedWeightIsFoundAtTheNextCheckNamingItsReplica) {
  if (test::world_size() != 6) GTEST_SKIP() << "needs 6 ranks (mpiexec -n 6)";
  for (const int replicas : {3, 2}) {
    const Ranks ranks(replicas * stages);
    if (ranks.comm == MPI_COMM_NULL) continue;
    for (int stage = 0; stage < stages; ++stage) {
      Config c = config(replicas, 6);
      c.check.replicas_every = 2;  // checks after steps 2, 4 and 6; the flip after step 3
      const int victim = rank_of(1, stage);
      const auto found = train_until_found(c, ranks.comm, [&](runtime::Trainer<float>& trainer, int s) {
        if (s == 2 && world_rank() == victim) flip_weight(trainer, 5, 12);
      });
      const std::string layout = std::to_string(replicas) + " replicas, stage " + std::to_string(stage);
      ASSERT_TRUE(found) << layout;
      EXPECT_EQ(found->step, 3) << layout;  // the next check, not the one before the flip
      // Three replicas name the odd one out; two name both.
      const std::vector<int> named = replicas == 3 ? std::vector<int>{victim} : std::vector<int>{stage, victim};
      EXPECT_EQ(found->corruption.ranks, named) << layout << ": " << found->corruption.what;
      EXPECT_NE(found->corruption.what.find("after step 4: stage " + std::to_string(stage) + ": replica"),
                std::string::npos)
          << found->corruption.what;
      EXPECT_EQ(found->corruption.what.find("stage " + std::to_string(1 - stage)), std::string::npos)
          << found->corruption.what;
    }
  }
}

TEST(SilentCorruption, AFlippedReducedGradientIsFoundAtItsStepNamingItsReplica) {
  if (test::world_size() != 6) GTEST_SKIP() << "needs 6 ranks (mpiexec -n 6)";
  // The shim flips the bit where MPI wrote it, from the host.
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    GTEST_SKIP() << "the gradient lives in device memory: the fault is injected from the host";
  } else {  // if constexpr: nvcc calls the loop unreachable after a skip it knows is taken
    // Both reductions: the ordered one's broadcast of the sum, and the all-reduce.
    for (const auto reduction : {DpReduction::ordered, DpReduction::allreduce}) {
      Config c = config(3, 4);
      c.check.replicas_every = 1;
      c.pipeline.dp_reduction = reduction;
      c.optim.grad_clip = 0;  // no global clip factor: the replica's other stage keeps its update
      const int victim = rank_of(2, 1);
      bool fired = false;
      const auto found = train_until_found(c, MPI_COMM_WORLD, [&](runtime::Trainer<float>& trainer, int s) {
        if (world_rank() != victim) return;
        const auto& stage = trainer.stage();
        // After step 0: the second sum from now on (step 2's) of this stage's gradient buffer.
        if (s == 0) test::arm({stage.grid().replicas, int(stage.chunk(0).params().size()), /*nth=*/2, 7, 20});
        fired = test::gradient_fault_fired();
      });
      test::disarm();
      const std::string what = std::string(to_string(reduction));
      if (world_rank() == victim) {
        EXPECT_TRUE(fired) << what;
      }
      ASSERT_TRUE(found) << what;
      EXPECT_EQ(found->step, 2) << what;  // the third step's sum: found after its update
      EXPECT_EQ(found->corruption.ranks, std::vector<int>{victim}) << what << ": " << found->corruption.what;
    }
  }
}

TEST(SilentCorruption, AForwardThatGaveOtherBytesIsFoundByItsRecomputation) {
  if (test::world_size() != 6) GTEST_SKIP() << "needs 6 ranks (mpiexec -n 6)";
  // One replica: nothing to compare but a forward with itself. Stage 0's first forward of step 4 (0-based 3)
  // "computed" one wrong bit: flipped in its output before the check runs the forward again.
  const Ranks ranks(stages);
  if (ranks.comm == MPI_COMM_NULL) return;
  Config c = config(1, 6);
  c.check.recompute_every = 2;
  const int victim = 0;
  auto grid = comm::make_grid(ranks.comm, stages, 1);
  std::optional<Found> found;
  {
    runtime::Trainer<float> trainer(c, test::corpus(), grid);
    runtime::CorruptionChecks<float, float> checks(trainer.stage());
    ASSERT_TRUE(checks.observes());
    std::int64_t step = 0;
    bool flipped = false;
    trainer.set_observer([&](const schedule::Action& a, int slot) {
      if (step == 3 && world_rank() == victim && a.op == schedule::Op::forward && !flipped) {
        const auto element = Kokkos::subview(trainer.stage().chunk(a.chunk).output(slot), 3, 1);
        float x = 0;
        Kokkos::deep_copy(x, element);
        Kokkos::deep_copy(element, std::nextafter(x, 1.0f));
        flipped = true;
      }
      checks.observe(a, slot);
    });
    for (; step < c.train.steps && !found; ++step) {
      checks.before_step(step);
      trainer.step();
      if (auto corruption = checks.after_step(step, false)) found = Found{step, *corruption};
    }
    trainer.set_observer({});
  }
  comm::free_grid(grid);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 3);  // step 2's check (0-based 1) passed
  EXPECT_EQ(found->corruption.ranks, std::vector<int>{victim});
  EXPECT_NE(found->corruption.what.find("a forward computed twice gave different bytes in step 4: rank 0 (stage 0 "
                                        "on node "),
            std::string::npos)
      << found->corruption.what;
}

// The final param_checksum of `c` trained from scratch without a fault.
std::uint64_t uninterrupted(const Config& c) {
  auto grid = comm::make_grid(MPI_COMM_WORLD, c.pipeline.pipeline_size, c.pipeline.data_parallel);
  std::uint64_t checksum = 0;
  {
    runtime::Trainer<float> trainer(c, test::corpus(), grid);
    for (int s = 0; s < c.train.steps; ++s) trainer.step();
    checksum = trainer.param_checksum();
  }
  comm::free_grid(grid);
  return checksum;
}

TEST(SilentCorruption, NothingThatDisagreesIsCheckpointedAndLatestLoadsVerified) {
  if (test::world_size() != 6) GTEST_SKIP() << "needs 6 ranks (mpiexec -n 6)";
  const test::SharedDir dir;
  Config c = config(3, 5);
  c.checkpoint.dir = dir.path;
  const int victim = rank_of(2, 0);
  std::uint64_t agreed = 0;
  {
    auto grid = comm::make_grid(MPI_COMM_WORLD, stages, 3);
    {
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
      io::CheckpointDir checkpoints(c.checkpoint, grid.world, c.pipeline.recv_timeout_s);
      checkpoints.start_run("");
      trainer.step();
      trainer.step();
      agreed = runtime::check_replicas(trainer.stage(), "after step 2").state_hash;
      ASSERT_TRUE(test::save(trainer, checkpoints).ok);
      trainer.step();
      if (world_rank() == victim) flip_weight(trainer, 0, 30);
      const io::SaveResult refused = test::save(trainer, checkpoints);
      EXPECT_FALSE(refused.ok);
      ASSERT_TRUE(refused.corruption);
      EXPECT_EQ(refused.corruption->ranks, std::vector<int>{victim}) << refused.message;
      EXPECT_NE(refused.message.find("checkpoint step-00000003.h5 not written: the replicas' weights and optimizer "
                                     "state differ after step 3: stage 0: replica 2 (rank 4 on node "),
                std::string::npos)
          << refused.message;
    }
    comm::free_grid(grid);
  }
  // Nothing of step 3 on storage; `latest` names step 2, whose recorded hash is the one the replicas agreed on.
  const std::string latest = io::checkpoint_file_of(dir.path);
  EXPECT_EQ(fs::path(latest).filename(), "step-00000002.h5");
  for (const auto& entry : fs::directory_iterator(dir.path))
    EXPECT_EQ(entry.path().filename().string().find("step-00000003"), std::string::npos) << entry.path();
  EXPECT_EQ(io::CheckpointReader(latest).text("state_hash"), hash_hex(agreed));

  // Resumed from `latest` (verified on every rank as it loads) and trained on without the fault: the
  // uninterrupted run's weights.
  std::uint64_t resumed_checksum = 0;
  {
    auto grid = comm::make_grid(MPI_COMM_WORLD, stages, 3);
    {
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
      CheckpointConfig resume = c.checkpoint;
      resume.resume = "latest";
      EXPECT_EQ(test::resume(trainer, resume).step, 2);
      EXPECT_EQ(runtime::check_replicas(trainer.stage(), "after loading").state_hash, agreed);
      while (trainer.next_step() < c.train.steps) trainer.step();
      resumed_checksum = trainer.param_checksum();
    }
    comm::free_grid(grid);
  }
  EXPECT_EQ(resumed_checksum, uninterrupted(c));
}

// `from` rewritten as `to` with one weight changed, its checksums and manifest made anew, every attribute kept:
// a file written from memory that changed after the replicas agreed (one process, no MPI).
void rewrite_with_one_weight_changed(const std::string& from, const std::string& to) {
  const io::CheckpointReader reader(from);
  io::CheckpointWriter writer(MPI_COMM_SELF, 60);
  std::vector<std::vector<float>> tensors;
  tensors.reserve(reader.datasets().size());
  bool changed = false;
  for (const auto& entry : reader.datasets()) {
    if (entry.type == io::ElementType::uint8) {
      writer.add_blob(entry.name, reader.read_blob(entry.name));
      continue;
    }
    tensors.emplace_back(std::size_t(entry.numel()));
    reader.read_tensor(entry.name, entry.shape, tensors.back().data());
    if (!changed && entry.name.rfind("/model/", 0) == 0) {
      tensors.back()[0] += 1e-3f;
      changed = true;
    }
    writer.add_tensor(entry.name, entry.shape, tensors.back().data());
  }
  for (const auto& [where, value] : reader.attributes()) writer.set_attribute(where.first, where.second, value);
  ASSERT_TRUE(changed);
  ASSERT_TRUE(writer.write(to).ok);
}

TEST(SilentCorruption, ALoadRefusesStateThatDoesNotHashToTheRecord) {
  if (test::world_size() != 6) GTEST_SKIP() << "needs 6 ranks (mpiexec -n 6)";
  const test::SharedDir dir;
  Config c = config(3, 2);
  c.checkpoint.dir = dir.path;
  const std::string forged = dir.path + "/forged.h5";
  {
    auto grid = comm::make_grid(MPI_COMM_WORLD, stages, 3);
    {
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
      io::CheckpointDir checkpoints(c.checkpoint, grid.world, c.pipeline.recv_timeout_s);
      checkpoints.start_run("");
      trainer.step();
      ASSERT_TRUE(test::save(trainer, checkpoints).ok);
    }
    comm::free_grid(grid);
  }
  if (world_rank() == 0) rewrite_with_one_weight_changed(io::checkpoint_file_of(dir.path), forged);
  MPI_Barrier(MPI_COMM_WORLD);
  // Every rank refuses it alike (on 6 replicas of one stage: another layout than the writer's).
  Config other = config(6, 2);
  other.pipeline.pipeline_size = 1;
  auto grid = comm::make_grid(MPI_COMM_WORLD, 1, 6);
  {
    runtime::Trainer<float> trainer(other, test::corpus(), grid);
    try {
      io::load_checkpoint(trainer.stage(), forged);
      ADD_FAILURE() << "the forged checkpoint loaded";
    } catch (const io::CorruptCheckpoint& e) {
      EXPECT_NE(std::string(e.what()).find("forged.h5': the state loaded hashes to "), std::string::npos) << e.what();
    }
  }
  comm::free_grid(grid);
}

}  // namespace
}  // namespace kpipe
