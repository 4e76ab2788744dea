// Memory predicted = memory measured, byte for byte, per category and per rank: for every schedule, with and
// without recomputation, on the whole world as one pipeline (1, 2 and 4 ranks) and as data-parallel layouts
// (pipeline x replicas), the bytes each category reaches while a trainer takes steps (counted from Kokkos
// Tools' allocation callbacks) equal memory::plan_rank's prediction from the model description and the
// schedule. The pools' sizes are compared too, which says where a difference comes from.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/bytes.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/memory/meter.hpp"
#include "kpipe/memory/plan.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/plan.hpp"

#include "support/corpus.hpp"
#include "support/mpi_world.hpp"

namespace kpipe {
namespace {

using test::world_size;

Config config_for(const std::string& schedule, int pipeline, int replicas, const std::string& recompute) {
  Config c;
  c.model.seq_len = 16;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_layers = 6;  // with embedding and head, 8 layers: one per virtual stage at 4 ranks x 2 chunks
  c.train.microbatches = 4 * replicas;
  c.train.batch = 8 * replicas;  // 2 sequences per micro-batch
  c.train.eval_batches = 1;
  c.pipeline.schedule = enum_value<ScheduleKind>(schedule);
  c.pipeline.chunks = schedule == "interleaved" || schedule == "zb-v" ? 2 : 1;
  c.pipeline.pipeline_size = pipeline;
  c.pipeline.data_parallel = replicas;
  c.memory.recompute = enum_value<Recompute>(recompute);
  return c;
}

std::string bytes_text(const memory::Bytes& b) {
  std::string text;
  for (auto c : memory::all_categories) text += fmt::format(" {}={}", memory::to_string(c), b[int(c)]);
  return text;
}

struct Measured {
  memory::Bytes bytes{};
  bool holds_head = false;  // this rank runs the model's last layer
};

// What one rank measured of a run of `c` (3 steps and an evaluation), held against its prediction; returns it.
template <class A = float> Measured expect_prediction_equals_measurement(const Config& c, const std::string& what) {
  auto grid = comm::make_grid(MPI_COMM_WORLD, c.pipeline.pipeline_size, c.pipeline.data_parallel);
  Measured result;
  {
    memory::Meter meter;
    runtime::Trainer<float, A> trainer(c, test::corpus(), grid);
    for (int s = 0; s < 3; ++s) trainer.step();
    trainer.evaluate();
    const auto plan = memory::plan_rank(c, trainer.desc(), trainer.plan().schedule, grid.replica, grid.stage);
    const auto measured = meter.peak();
    EXPECT_EQ(measured, plan.bytes) << what << " rank " << grid.world_rank << "\n  measured:" << bytes_text(measured)
                                    << "\n  predicted:" << bytes_text(plan.bytes);
    EXPECT_EQ(meter.live(), measured) << what << ": nothing is freed while training";
    EXPECT_EQ(trainer.record().message_buffers, plan.message_buffers) << what;
    for (int k = 0; k < trainer.stage().chunks(); ++k) {
      EXPECT_EQ(trainer.stage().chunk(k).allocated_slots(), plan.chunks[k].slots) << what << " chunk " << k;
      EXPECT_EQ(trainer.stage().chunk(k).allocated_backward_sets(), plan.chunks[k].backward_sets) << what << " chunk " << k;
    }
    EXPECT_EQ(measured[int(memory::Category::weight_versions)], 0) << what;
    EXPECT_GT(measured[int(memory::Category::activations)], 0) << what << ": the meter sees the slots";
    result.bytes = measured;
    for (int k = 0; k < trainer.stage().chunks(); ++k) result.holds_head |= trainer.stage().chunk(k).last();
  }
  comm::free_grid(grid);
  return result;
}

// bf16 stores activations, the gradients between layers and the messages in half the bytes: predicted as
// measured, and about half of fp32's. Not on the rank of the head: its logits and losses stay in fp32, and its
// backward holds dL/dlogits rounded to bf16 in a buffer of its own (fp32 overwrites the logits in place).
TEST(Memory, Bf16HalvesActivationsAndMessagesAsPredicted) {
  const int p = world_size();
  for (const std::string schedule : {"1f1b", "zb-v"}) {
    Config c = config_for(schedule, p, 1, "none");
    c.model.d_model = 128;  // wide enough that the head's logits (float in both) do not dominate a stage
    c.model.n_heads = 4;
    const memory::Bytes fp32 = expect_prediction_equals_measurement(c, schedule + " fp32").bytes;
    c.train.precision = Precision::bf16;
    const Measured mixed = expect_prediction_equals_measurement<kpipe::bf16>(c, schedule + " bf16");
    const memory::Bytes& bf16 = mixed.bytes;
    const bool head = mixed.holds_head;
    const auto ratio = [&](memory::Category k) { return double(bf16[int(k)]) / double(fp32[int(k)]); };
    EXPECT_EQ(bf16[int(memory::Category::messages)] * 2, fp32[int(memory::Category::messages)]) << schedule;
    if (!head) {
      EXPECT_GT(ratio(memory::Category::activations), 0.45) << schedule;
      EXPECT_LT(ratio(memory::Category::activations), 0.6) << schedule;
      EXPECT_LT(ratio(memory::Category::backward), 0.6) << schedule;
    }
    EXPECT_EQ(bf16[int(memory::Category::optimizer)], fp32[int(memory::Category::optimizer)]) << "fp32 moments";
    EXPECT_EQ(bf16[int(memory::Category::gradients)], fp32[int(memory::Category::gradients)]) << "fp32 gradients";
  }
}

TEST(Memory, PredictionEqualsMeasurementForEverySchedule) {
  const int n = world_size();
  for (const std::string schedule : {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"})
    for (const std::string recompute : {"none", "block"})
      expect_prediction_equals_measurement(config_for(schedule, n, 1, recompute),
                                           schedule + " recompute=" + recompute + " p=" + std::to_string(n));
  for (const std::string recompute : {"attention", "mlp"})
    expect_prediction_equals_measurement(config_for("zb-h1", n, 1, recompute), "zb-h1 recompute=" + recompute);
  // The balanced partition (it weighs memory with the schedule's peak in flight): the plan uses the trainer's.
  for (const std::string schedule : {"gpipe", "1f1b", "zb-v"})
    for (const std::string recompute : {"none", "block"}) {
      Config c = config_for(schedule, n, 1, recompute);
      c.pipeline.partition = PartitionKind::balanced;
      expect_prediction_equals_measurement(c, schedule + " balanced recompute=" + recompute + " p=" + std::to_string(n));
    }
}

// Asynchronous schedules: their weight versions too (as many as the lists hold at once: one in the stage's
// parameter buffers, the others in buffers of their layout, compute copy included under bf16), run past the
// warm-up so that every stage holds its most, with an evaluation in the middle of the run and one after its
// drain; with replicas, the buffer that the ordered sum arrives in.
template <class A = float> void expect_async_prediction_equals_measurement(const Config& c, const std::string& what) {
  auto grid = comm::make_grid(MPI_COMM_WORLD, c.pipeline.pipeline_size, c.pipeline.data_parallel);
  {
    memory::Meter meter;
    runtime::Trainer<float, A> trainer(c, test::corpus(), grid);
    for (int s = 0; s < c.train.steps; ++s) {
      trainer.step();
      if (s == 2) trainer.evaluate();  // micro-batches in flight keep their slots: evaluation plans around them
    }
    trainer.evaluate();
    const auto plan = memory::plan_rank(c, trainer.desc(), trainer.plan().schedule, grid.replica, grid.stage);
    const auto measured = meter.peak();
    EXPECT_EQ(measured, plan.bytes) << what << " rank " << grid.world_rank << "\n  measured:" << bytes_text(measured)
                                    << "\n  predicted:" << bytes_text(plan.bytes);
    EXPECT_EQ(trainer.record().message_buffers, plan.message_buffers) << what;
    const auto versions = measured[int(memory::Category::weight_versions)];
    const auto parameters = measured[int(memory::Category::parameters)];
    // The chunk's own parameter buffers hold one version, the pool's the others.
    EXPECT_EQ(versions, (trainer.stage().versions(0).peak() - 1) * parameters) << what;
    EXPECT_EQ(trainer.stage().versions(0).allocated(), trainer.stage().versions(0).peak() - 1) << what;
  }
  comm::free_grid(grid);
}

TEST(Memory, PredictionEqualsMeasurementForAsynchronousSchedules) {
  const int n = world_size();
  for (int replicas = 1; replicas <= n; replicas *= 2)
    for (const std::string reduction : {"ordered", "allreduce"})
      for (const auto& [schedule, vertical] : {std::pair{"pipedream", 0}, std::pair{"pipedream", 1}, std::pair{"2bw", 0}}) {
        if (replicas == 1 && reduction == "allreduce") continue;
        Config c = config_for(schedule, n / replicas, replicas, "none");
        c.pipeline.vertical_sync = vertical;
        c.pipeline.dp_reduction = enum_value<DpReduction>(reduction);
        c.train.steps = 7;  // past the lists' horizon (5 steps at p = 4): their repeated step runs too
        expect_async_prediction_equals_measurement(
            c, fmt::format("{} vertical_sync={} {}x{} {}", schedule, vertical, n / replicas, replicas, reduction));
      }
  for (const std::string schedule : {"pipedream", "2bw"}) {
    Config c = config_for(schedule, n, 1, "none");
    c.train.steps = 7;
    c.train.precision = Precision::bf16;
    expect_async_prediction_equals_measurement<bf16>(c, schedule + " bf16 " + std::to_string(n) + "x1");
  }
}

TEST(Memory, PredictionEqualsMeasurementWithReplicas) {
  const int n = world_size();
  if (n == 1) return;  // one rank holds one replica
  for (int replicas = 2; replicas <= n; replicas *= 2)
    for (const std::string schedule : {"1f1b", "zb-h1", "zb-v"})
      for (const std::string reduction : {"ordered", "allreduce"}) {
        Config c = config_for(schedule, n / replicas, replicas, "none");
        c.pipeline.dp_reduction = enum_value<DpReduction>(reduction);
        expect_prediction_equals_measurement(c, schedule + " " + reduction + " " + std::to_string(n / replicas) + "x" +
                                                    std::to_string(replicas));
      }
}

// The runtime takes the slots the buffer plan names, the plan the memory plan reads: every forward's slot is its
// position's in the plan, on every step of a run, the asynchronous lists' repeated step (renumbered at its end)
// included.
TEST(Memory, TheRuntimeTakesThePlansSlots) {
  const int n = world_size();
  for (const std::string schedule : {"1f1b", "interleaved", "zb-v", "pipedream", "2bw"}) {
    Config c = config_for(schedule, n, 1, "none");
    c.train.steps = 7;  // past an asynchronous horizon: the template step repeats
    auto grid = comm::make_grid(MPI_COMM_WORLD, n, 1);
    {
      runtime::Trainer<float> trainer(c, test::corpus(), grid);
      std::map<std::pair<std::int64_t, int>, int> taken;  // (micro-batch, chunk) -> slot, this step
      trainer.set_observer([&](const schedule::Action& a, int slot) {
        if (a.op == schedule::Op::forward) taken[{a.microbatch, a.chunk}] = slot;
      });
      const auto& plan = trainer.plan();
      const auto& lists = plan.lists();
      for (int s = 0; s < c.train.steps; ++s) {
        taken.clear();
        trainer.step();
        const auto source = lists.asynchronous()
                                ? schedule::step_source(int(plan.steps.size()), plan.template_step, c.train.steps, s)
                                : schedule::StepSource{};
        const auto [begin, end] = plan.steps.at(source.step);
        int forwards = 0;
        for (std::size_t i = begin; i < end; ++i) {
          if (plan.actions[i].op != schedule::Op::forward) continue;
          const std::int64_t microbatch = plan.actions[i].microbatch + std::int64_t(source.shift) * lists.microbatches;
          EXPECT_EQ(taken.at({microbatch, plan.actions[i].chunk}), plan.buffers().slot.at(i))
              << schedule << " step " << s << " position " << i;
          ++forwards;
        }
        EXPECT_EQ(int(taken.size()), forwards) << schedule << " step " << s;
      }
    }
    comm::free_grid(grid);
  }
}

// Recomputation keeps less per micro-batch: on every rank the activations shrink, and block keeps least.
TEST(Memory, RecomputationShrinksTheActivations) {
  const int n = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<std::int64_t> activations;
  for (const std::string recompute : {"none", "attention", "mlp", "block"}) {
    const Config c = config_for("1f1b", n, 1, recompute);
    const auto schedule = schedule::plan(c, schedule::Delivery::buffered);
    const auto plan = memory::plan_rank(c, model::describe(c.model), schedule, 0, rank);
    activations.push_back(plan.bytes[int(memory::Category::activations)]);
  }
  EXPECT_LT(activations[1], activations[0]);
  EXPECT_LT(activations[2], activations[0]);
  EXPECT_LT(activations[3], activations[1]);
  EXPECT_LT(activations[3], activations[2]);
}

}  // namespace
}  // namespace kpipe
