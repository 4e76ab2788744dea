// The launch structure of a micro-batch, counted through Kokkos Tools callbacks: kernel launches per block and
// pass, fences, deep copies, and allocations once the first micro-batch has run. A GPU pays a few microseconds
// for each launch and a pipeline drain for each fence, so on a small model these, not the arithmetic, set the
// step time; the counts are the same on every backend (the build's kernel path decides them), so a CPU build
// shows what a GPU would pay. Budgets are stated per pass below; a change that adds launches must say why here.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <cstring>
#include <map>
#include <string>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/kernel_path.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "support/corpus.hpp"

namespace kpipe::model {
namespace {

// What the callbacks count; one counter at a time (Kokkos Tools callbacks are plain function pointers).
struct Counts {
  int launches = 0, widenings = 0, fences = 0, copies = 0, allocations = 0;
  Counts operator-(const Counts& o) const {
    return {launches - o.launches, widenings - o.widenings, fences - o.fences, copies - o.copies,
            allocations - o.allocations};
  }
};
Counts counts;
// Fences by name (Kokkos 4 passes the name given to fence(); Kokkos 3.4 reports none).
std::map<std::string, int> fence_names;

// Host builds give bf16 products to a float BLAS through widening and narrowing kernels (core/blas.cpp); a GPU
// build's cuBLAS takes bf16 itself, so those are counted apart and are not the launch structure budgeted here.
constexpr const char* widening_prefix = "kpipe::blas::gemm::";

void on_kernel(const char* name, std::uint32_t, std::uint64_t*) {
  if (std::strncmp(name, widening_prefix, std::strlen(widening_prefix)) == 0) {
    ++counts.widenings;
  } else {
    ++counts.launches;
  }
}
// Fences Kokkos' profiling issues itself around a tool's callbacks are not the program's: not counted.
constexpr const char* tools_fence_prefix = "Kokkos::Tools::";

void on_fence(const char* name, std::uint32_t, std::uint64_t*) {
  if (std::strncmp(name, tools_fence_prefix, std::strlen(tools_fence_prefix)) == 0) return;
  ++counts.fences;
  ++fence_names[name];
}
void on_copy(Kokkos::Tools::SpaceHandle, const char*, const void*, Kokkos::Tools::SpaceHandle, const char*,
             const void*, std::uint64_t) {
  ++counts.copies;
}
void on_allocate(Kokkos::Tools::SpaceHandle, const char*, const void*, std::uint64_t) { ++counts.allocations; }

// Installs the counting callbacks for its lifetime and puts back whatever was there before.
class LaunchCounter {
 public:
  LaunchCounter() : previous_(Kokkos::Tools::Experimental::get_callbacks()) {
    namespace tools = Kokkos::Tools::Experimental;
    counts = {};
    fence_names.clear();
    tools::set_begin_parallel_for_callback(on_kernel);
    tools::set_begin_parallel_reduce_callback(on_kernel);
    tools::set_begin_parallel_scan_callback(on_kernel);
    tools::set_begin_fence_callback(on_fence);
    tools::set_begin_deep_copy_callback(on_copy);
    tools::set_allocate_data_callback(on_allocate);
  }
  ~LaunchCounter() { Kokkos::Tools::Experimental::set_callbacks(previous_); }
  LaunchCounter(const LaunchCounter&) = delete;
  LaunchCounter& operator=(const LaunchCounter&) = delete;

 private:
  Kokkos::Tools::Experimental::EventSet previous_;
};

ModelConfig model_of(int layers) {
  ModelConfig c;
  c.seq_len = 16;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_layers = layers;
  return c;
}

// The counts of each pass of one micro-batch through a whole-model chunk of `layers` blocks, after a first
// micro-batch that allocates what the chunk allocates lazily.
struct PassCounts {
  Counts forward, backward_input, backward_weight, loss;
  std::map<std::string, int> fences;  // the four passes', by name
};

template <class T, class A> PassCounts count_passes(int layers) {
  const auto desc = describe(model_of(layers));
  Chunk<T, A> chunk(desc, 0, int(desc.layers.size()), 2);
  ExecSpace space;
  chunk.params().initialize(space, 7);
  const Kokkos::View<double, MemSpace> loss("loss");
  const auto run = [&](PassCounts* out) {
    const int slot = chunk.acquire();
    Kokkos::deep_copy(chunk.tokens(slot), Token(3));
    Kokkos::deep_copy(chunk.targets(slot), Token(5));
    fence_names.clear();  // the passes' own, not the fills' above
    Counts before = counts;
    const auto mark = [&](Counts& into) {
      into = counts - before;
      before = counts;
    };
    PassCounts passes;
    chunk.forward(space, slot);
    mark(passes.forward);
    chunk.loss_sum(space, slot, loss);
    mark(passes.loss);
    chunk.backward_input(space, slot, T(1));
    mark(passes.backward_input);
    chunk.backward_weight(space, slot);
    mark(passes.backward_weight);
    chunk.release(slot);
    passes.fences = fence_names;
    if (out) *out = passes;
  };
  LaunchCounter counter;
  run(nullptr);
  PassCounts second;
  run(&second);
  space.fence();
  return second;
}

// Fences a device build does not have: a host backend's stand-in for a stream event (core/stream_event.cpp:
// recording one fences there; CUDA records a cudaEvent_t), Kokkos' host sort (the embedding's backward; CUDA
// sorts on the stream), and the fence before a host BLAS's bf16 product (core/blas.cpp: it runs on the calling
// thread, outside Kokkos; cuBLAS is queued on the stream).
bool host_only_fence(const std::string& name) {
  for (const char* prefix : {"kpipe::StreamEvent::record", "Kokkos::sort", "kpipe::blas::"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The launch counts measured on each kernel path, equal, not "at most": a change that adds or removes a launch
// changes them here and says why. A block's forward: two LayerNorms, two bias (+ residual) epilogues, the bias
// + GeLU pass, attention's three kernels (q|k|v to head-major, the softmax of each block of query rows, the
// heads back: one block at the tiny model's 64 tokens); mixed precision adds the residual and runs ln2 in one
// kernel; the host path's fp32 epilogues are a pass of their own (one launch more). Its backward_input: the
// GeLU backward, two LayerNorm backwards, attention's three; its backward_weight: four bias column sums and two
// LayerNorm column sums, one launch each. Attention's products are vendor calls (cuBLAS strided-batched on
// GPUs), not Kokkos launches. The embedding and the head: forward 3, loss 1, backward_input 2, backward_weight 5.
struct PassBudget {
  int forward, backward_input, backward_weight;
};
template <class T, class A> constexpr PassBudget block_budget() {
  if (mixed_precision<T, A>) return {8, 6, 6};
  return {default_kernel_path == KernelPath::device ? 9 : 10, 6, 6};
}
constexpr PassBudget ends_budget{3, 2, 5};  // the embedding and the head, forward / backward_input / weight
constexpr int loss_launches = 1;

template <class T, class A> void expect_within_budget(const char* precision) {
  SCOPED_TRACE(precision);
  const PassCounts one = count_passes<T, A>(1), three = count_passes<T, A>(3);
  // Per block: the difference of a three-block and a one-block model, halved.
  const int forward = (three.forward.launches - one.forward.launches) / 2;
  const int input = (three.backward_input.launches - one.backward_input.launches) / 2;
  const int weight = (three.backward_weight.launches - one.backward_weight.launches) / 2;
  std::printf("%s: launches per block: forward %d, backward_input %d, backward_weight %d; embedding + head: "
              "forward %d, loss %d, backward_input %d, backward_weight %d; fences %d/%d/%d/%d, copies %d/%d/%d/%d\n",
              precision, forward, input, weight, one.forward.launches - forward, one.loss.launches,
              one.backward_input.launches - input, one.backward_weight.launches - weight, three.forward.fences,
              three.loss.fences, three.backward_input.fences, three.backward_weight.fences, three.forward.copies,
              three.loss.copies, three.backward_input.copies, three.backward_weight.copies);
  constexpr PassBudget block = block_budget<T, A>();
  EXPECT_EQ(forward, block.forward);
  EXPECT_EQ(input, block.backward_input);
  EXPECT_EQ(weight, block.backward_weight);
  EXPECT_EQ(one.forward.launches - forward, ends_budget.forward);
  EXPECT_EQ(one.loss.launches, loss_launches);
  EXPECT_EQ(one.backward_input.launches - input, ends_budget.backward_input);
  EXPECT_EQ(one.backward_weight.launches - weight, ends_budget.backward_weight);
  // Nor a copy: the residual stream's gradient is added by the LayerNorm backwards as they write (it was two
  // deep copies of [rows, C] a block), and the loss stays on the device (loss_sum writes a device scalar).
  for (const PassCounts* p : {&one, &three})
    for (const Counts* c : {&p->forward, &p->loss, &p->backward_input, &p->backward_weight})
      EXPECT_EQ(c->copies, 0);
  // Nothing is allocated once the first micro-batch has run: every buffer is the chunk's own, made up front.
  for (const PassCounts* p : {&one, &three})
    for (const Counts* c : {&p->forward, &p->loss, &p->backward_input, &p->backward_weight})
      EXPECT_EQ(c->allocations, 0);
}

TEST(LaunchBudget, Float) { expect_within_budget<float, float>("fp32"); }
TEST(LaunchBudget, Bf16) { expect_within_budget<float, bf16>("bf16"); }

// No pass waits for the device: no fence but the host-only ones (a host BLAS's, above), by name.
template <class T, class A> void expect_no_device_fence_in_a_pass(const char* precision) {
  SCOPED_TRACE(precision);
  for (const auto& [name, count] : count_passes<T, A>(2).fences) {
    std::printf("%s: fence x%d%s: %s\n", precision, count, host_only_fence(name) ? " (host only)" : "", name.c_str());
    EXPECT_TRUE(host_only_fence(name)) << name << " x" << count;
  }
}

TEST(LaunchBudget, NoPassWaitsForTheDevice) {
  if (KOKKOS_VERSION < 30500) GTEST_SKIP() << "Kokkos " << KOKKOS_VERSION << " reports no fence to tools";
  expect_no_device_fence_in_a_pass<float, float>("fp32");
  expect_no_device_fence_in_a_pass<float, bf16>("bf16");
}

// Whole training steps on one rank: what a step costs in launches, fences, copies between memories, and
// allocations once the first step has run, counted over a steady step (the last of a few). A small model
// (2 blocks, d_model 32, 4 micro-batches of 2 sequences of 16 tokens) under a synchronous schedule (1F1B: one
// optimizer step after the flush) and an asynchronous one (PipeDream: an update per micro-batch).
struct StepCounts {
  Counts step;                       // the last step's
  int later_allocations = 0;         // over every step after the first
  std::map<std::string, int> fences;  // the last step's, by name
};

template <class A> StepCounts count_step(ScheduleKind schedule) {
  Config c;
  c.model.seq_len = 16;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_layers = 2;
  c.train.microbatches = 4;
  c.train.batch = 2 * c.train.microbatches;
  c.train.steps = 4;
  c.train.precision = mixed_precision<float, A> ? Precision::bf16 : Precision::fp32;
  c.pipeline.schedule = schedule;
  auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
  StepCounts result;
  {
    runtime::Trainer<float, A> trainer(c, test::corpus(), grid);
    LaunchCounter counter;
    trainer.step();  // allocates what the run allocates lazily (the stash, the first version)
    const Counts after_first = counts;
    for (int s = 1; s + 1 < c.train.steps; ++s) trainer.step();
    const Counts before_last = counts;
    fence_names.clear();
    trainer.step();
    result.step = counts - before_last;
    result.later_allocations = counts.allocations - after_first.allocations;
    result.fences = fence_names;
  }
  comm::free_grid(grid);
  return result;
}

StepCounts count_and_print(ScheduleKind schedule, bool bf16_run, const char* what) {
  const StepCounts n = bf16_run ? count_step<bf16>(schedule) : count_step<float>(schedule);
  std::printf("%s: per step: launches %d (+%d host bf16 widenings), fences %d, deep copies %d; allocations after "
              "the first step %d\n",
              what, n.step.launches, n.step.widenings, n.step.fences, n.step.copies, n.later_allocations);
  for (const auto& [name, count] : n.fences)
    std::printf("  fence x%d%s: %s\n", count, host_only_fence(name) ? " (host only)" : "", name.c_str());
  return n;
}

// A step's budget, as measured: launches in fp32 and in bf16 (fewer: the compute copy is written by the
// update's own kernel, and mixed precision fuses ln2 into the residual's kernel) and deep copies
// (docs/performance.md lists them).
struct StepBudget {
  int fp32_launches, bf16_launches, copies;
};

void expect_step_within_budget(ScheduleKind schedule, const char* name, const StepBudget& budget) {
  const StepCounts fp32 = count_and_print(schedule, false, (std::string(name) + " fp32").c_str());
  const StepCounts mixed = count_and_print(schedule, true, (std::string(name) + " bf16").c_str());
  EXPECT_EQ(fp32.step.launches, budget.fp32_launches);
  EXPECT_EQ(mixed.step.launches, budget.bf16_launches);
  for (const StepCounts* n : {&fp32, &mixed}) {
    SCOPED_TRACE(n == &fp32 ? "fp32" : "bf16");
    EXPECT_EQ(n->step.copies, budget.copies);
    EXPECT_EQ(n->later_allocations, 0);  // every buffer a step uses exists once the first step has run
  }
}

// The step's fences by name, host-only ones aside (Kokkos 3.4 names none: the test is skipped there).
void expect_step_fences(ScheduleKind schedule, const char* name, const std::map<std::string, int>& budget) {
  if (KOKKOS_VERSION < 30500) GTEST_SKIP() << "Kokkos " << KOKKOS_VERSION << " reports no fence names";
  for (const bool bf16_run : {false, true}) {
    SCOPED_TRACE(bf16_run ? "bf16" : "fp32");
    const StepCounts n = bf16_run ? count_step<bf16>(schedule) : count_step<float>(schedule);
    std::map<std::string, int> device_fences;
    for (const auto& [fence, count] : n.fences)
      if (!host_only_fence(fence)) device_fences[fence] = count;
    EXPECT_EQ(device_fences, budget) << name;
  }
}

// Budgets: 4 micro-batches through 2 blocks, launches as measured (docs/performance.md lists them) on each
// kernel path: the host path's fp32 forward has a launch a block more. Fences: the losses read
// once per step, and the gradient norm's sums once per optimizer step (clipping scales the update by the norm,
// which the host computes): once after the flush (1F1B), once per micro-batch's update (PipeDream).
constexpr bool device_path = default_kernel_path == KernelPath::device;
constexpr const char* losses_fence = "kpipe::runtime::TokenSource::read_losses: the host reads the losses";
const std::map<std::string, int> one_f_one_b_fences = {
    {losses_fence, 1}, {"kpipe::runtime::FlushUpdates::optimizer_step: the host reads the gradient norm's sums", 1}};
const std::map<std::string, int> pipedream_fences = {
    {losses_fence, 1}, {"kpipe::model::ParameterStore::layer_grad_squares: the host reads the sums", 4}};

TEST(LaunchBudget, TrainingStepOneFOneB) {
  expect_step_within_budget(ScheduleKind::one_f_one_b, "1f1b", {device_path ? 218 : 226, 210, 11});
}
TEST(LaunchBudget, TrainingStepPipeDream) {
  expect_step_within_budget(ScheduleKind::pipedream, "pipedream", {device_path ? 233 : 241, 225, 14});
}
TEST(LaunchBudget, TrainingStepFencesOneFOneB) {
  expect_step_fences(ScheduleKind::one_f_one_b, "1f1b", one_f_one_b_fences);
}
TEST(LaunchBudget, TrainingStepFencesPipeDream) {
  expect_step_fences(ScheduleKind::pipedream, "pipedream", pipedream_fences);
}

}  // namespace
}  // namespace kpipe::model
