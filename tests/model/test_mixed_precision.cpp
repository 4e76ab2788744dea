// A model chunk in mixed precision (float arithmetic and master weights, bf16 storage): its gradients against
// the float64 model's, its results the same bits whatever is recomputed and however the backwards are split,
// and its allocations exactly what chunk_bytes predicts (the memory plan's figures).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kpipe/core/hash.hpp"
#include "kpipe/memory/meter.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/nn/optimizer.hpp"
#include "support/precision.hpp"

namespace kpipe::model {
namespace mixed_precision_test {  // named: the unity build puts test_model.cpp's helpers beside these

constexpr double u = test::bf16_roundoff;

ModelConfig tiny_model() {
  ModelConfig c;
  c.seq_len = 5;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  c.init_std = 0.3;  // as the float64 gradient check of test_model.cpp
  return c;
}

template <class T, class A> void fill_tokens(Chunk<T, A>& chunk, int slot, std::uint64_t seed) {
  auto tokens = Kokkos::create_mirror_view(chunk.tokens(slot));
  auto targets = Kokkos::create_mirror_view(chunk.targets(slot));
  for (std::size_t i = 0; i < tokens.extent(0); ++i) {
    tokens(i) = Token((i * 37 + seed * 11) % 256);
    targets(i) = Token((i * 53 + seed * 7 + 3) % 256);
  }
  Kokkos::deep_copy(chunk.tokens(slot), tokens);
  Kokkos::deep_copy(chunk.targets(slot), targets);
}

// The whole two-block model, one micro-batch, bf16 against float64 at the same master weights (float values,
// exact in both). Per tensor, normwise: |error|_max <= u R |gradient|_max (and the same for the loss), where
// R counts the bf16 rounding points between the inputs and that quantity: the weights' compute copies a
// product reads, and every stored activation and gradient on the way, forward then back. This assumes each
// layer passes relative errors on without amplifying them (LayerNorm renormalizes, the residual stream adds
// terms of like size); the layer tests (tests/nn/test_mixed_precision.cpp) hold every layer to its
// element-by-element bound, which this composition check does not replace.
//   forward to the loss:  embedding 1 + per block (h1, qkv, probs, att, x2, h2, f, g, out: 9; 4 weight
//                         copies) + the head (h, its weight copy): 1 + 2 x 13 + 2 = 29
//   back to a gradient:   dlogits, dh + per block (dg, df, dh2, dx2, datt, dS, dqkv, dh1, dx: 9): 2 + 18 = 20
// So R = 29 for the loss and 49 for the gradients (those nearer the head pass fewer, and get the same bound).
TEST(MixedPrecision, WholeModelGradientsMatchFloat64WithinTheRoundingBound) {
  const auto desc = describe(tiny_model());
  const int layers = int(desc.layers.size());
  ExecSpace space;
  Chunk<double> exact(desc, 0, layers, 2);
  Chunk<float, bf16> mixed(desc, 0, layers, 2);
  exact.params().initialize(space, 7);
  // The same masters: the float64 model takes the float values of its own initialization.
  auto values = test::host_values(exact.params().values());
  for (double& v : values) v = double(float(v));
  test::assign(exact.params().values(), values);
  test::assign(mixed.params().values(), values);
  mixed.params().refresh_compute_copy(space);

  auto run = [&](auto& chunk) {
    const int slot = chunk.acquire();
    fill_tokens(chunk, slot, 1);
    const double scale = 1.0 / double(chunk.rows());
    chunk.forward(space, slot);
    const double loss = chunk.loss_sum(space, slot) * scale;
    chunk.backward_input(space, slot, scale);
    chunk.backward_weight(space, slot);
    return loss;
  };
  const double loss_exact = run(exact), loss_mixed = run(mixed);
  EXPECT_LE(std::abs(loss_mixed - loss_exact), 29 * u * std::abs(loss_exact)) << loss_mixed << " vs " << loss_exact;
  const auto g_exact = test::host_values(exact.params().grads()), g_mixed = test::host_values(mixed.params().grads());
  for (const auto& s : exact.params().slots()) {
    double largest = 0, error = 0;
    for (std::int64_t i = s.offset; i < s.offset + s.spec->numel(); ++i) {
      largest = std::max(largest, std::abs(g_exact[i]));
      error = std::max(error, std::abs(g_mixed[i] - g_exact[i]));
    }
    EXPECT_GT(largest, 0.0) << s.path();
    EXPECT_LE(error, 49 * u * largest) << s.path() << ": error " << error << ", largest " << largest << " ("
                                       << error / (u * largest) << " u)";
  }
}

// Gradient hash after two micro-batches through a whole-model chunk in bf16, with the backwards in the given
// order: the rounding points are part of the definition, not of the schedule (test_model.cpp's float check).
std::uint64_t two_microbatch_gradients(nn::Recompute recompute, bool split) {
  const auto desc = describe(tiny_model());
  ExecSpace space;
  Chunk<float, bf16> chunk(desc, 0, int(desc.layers.size()), 2, recompute);
  chunk.params().initialize(space, 7);
  const int a = chunk.acquire(), b = chunk.acquire();
  fill_tokens(chunk, a, 1);
  fill_tokens(chunk, b, 2);
  chunk.forward(space, a);
  chunk.forward(space, b);
  if (split) {
    chunk.backward_input(space, a, 0.1f);
    chunk.backward_input(space, b, 0.1f);
    chunk.backward_weight(space, a);
    chunk.backward_weight(space, b);
  } else {
    for (const int slot : {a, b}) {
      chunk.backward_input(space, slot, 0.1f);
      chunk.backward_weight(space, slot);
    }
  }
  auto grads = Kokkos::create_mirror_view_and_copy(HostSpace(), chunk.params().grads());
  double norm = 0;
  for (std::size_t i = 0; i < grads.span(); ++i) norm += std::abs(grads(i));
  EXPECT_GT(norm, 0.0) << "the comparison is not between zeros";
  return xxh64(grads.data(), grads.span() * sizeof(float));
}

TEST(MixedPrecision, RecomputationAndSplitBackwardsGiveTheSameBits) {
  const auto reference = two_microbatch_gradients(nn::Recompute::none, false);
  for (auto mode : {nn::Recompute::none, nn::Recompute::attention, nn::Recompute::mlp, nn::Recompute::block})
    for (bool split : {false, true})
      EXPECT_EQ(two_microbatch_gradients(mode, split), reference) << to_string(mode) << (split ? " split" : "");
}

// The compute copy is each product matrix's master value rounded once; the other tensors have none.
TEST(MixedPrecision, ComputeCopyHoldsTheProductMatricesRounded) {
  const auto desc = describe(tiny_model());
  ExecSpace space;
  ParameterStore<float, bf16> store(desc, 0, int(desc.layers.size()));
  store.initialize(space, 3);
  EXPECT_EQ(store.compute_size(), (compute_copy_elements<float, bf16>(desc, 0, int(desc.layers.size()))));
  EXPECT_EQ((compute_copy_elements<float, float>(desc, 0, int(desc.layers.size()))), 0);
  const auto values = test::host_values(store.values()), copy = test::host_values(store.compute_values());
  int copied = 0;
  for (const auto& s : store.slots()) {
    EXPECT_EQ(s.compute_offset >= 0, s.spec->product_operand) << s.path();
    if (s.compute_offset < 0) {
      EXPECT_THROW(store.compute_matrix(s.layer, s.spec->name), std::logic_error) << s.path();
      continue;
    }
    ++copied;
    for (std::int64_t i = 0; i < s.spec->numel(); ++i)
      ASSERT_EQ(copy[s.compute_offset + i], double(float(bf16(float(values[s.offset + i]))))) << s.path();
  }
  EXPECT_EQ(copied, 4 * 2 + 1);  // qkv, proj, fc, mlp proj per block; the LM head
  // Changing the masters changes the copy only when refreshed.
  Kokkos::deep_copy(store.values(), 0.5f);
  EXPECT_EQ(test::host_values(store.compute_values()), copy);
  store.refresh_compute_copy(space);
  for (double x : test::host_values(store.compute_values())) EXPECT_EQ(x, 0.5);
}

// Gradients in [-1, 1], different per element. A free function: CUDA refuses a kernel lambda in a test body
// (a private member function of the test's class).
void fill_gradients(const ExecSpace& space, const View1<float>& grads) {
  Kokkos::parallel_for("test grads", range(space, grads.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
    grads(i) = float(0.01 * double((i * 7919) % 201 - 100));
  });
}

// The optimizer's update writes the compute copy in its own kernel (nn/optimizer.hpp): the same bits a refresh
// after it would give, for AdamW and SGD, in place and from another version's weights.
TEST(MixedPrecision, UpdateWritesTheComputeCopyARefreshWould) {
  const auto desc = describe(tiny_model());
  ExecSpace space;
  ParameterStore<float, bf16> store(desc, 0, int(desc.layers.size()));
  OptimizerConfig cfg;
  cfg.weight_decay = 0.1;
  const View1<float> other("other version", store.size());
  for (const bool sgd : {false, true})
    for (const bool apart : {false, true}) {
      SCOPED_TRACE(std::string(sgd ? "sgd" : "adamw") + (apart ? " from another buffer" : " in place"));
      store.initialize(space, 5);
      Kokkos::deep_copy(other, store.values());
      fill_gradients(space, store.grads());
      const View1<const float> from = apart ? View1<const float>(other) : View1<const float>(store.values());
      if (sgd)
        nn::sgd_update_into(space, cfg, 0.5, 1.0, from, store.values(), store.grads(), store.moment1(),
                            store.decay_mask(), 0, store.rounded_copy());
      else
        nn::adamw_update_into(space, cfg, 0.5, 2, 1.0, from, store.values(), store.grads(), store.moment1(),
                              store.moment2(), store.decay_mask(), 0, store.rounded_copy());
      const auto written = test::host_values(store.compute_values());
      store.refresh_compute_copy(space);
      EXPECT_EQ(written, test::host_values(store.compute_values()));
    }
}

// What a chunk allocates, category by category, after two micro-batches with split backwards (two slots and
// two sets of backward buffers), is what chunk_bytes says, for the first, a middle and the last chunk.
template <class T, class A> void expect_allocations_predicted(nn::Recompute recompute) {
  ModelConfig c;
  c.n_layers = 3;
  const auto desc = describe(c);
  const int layers = int(desc.layers.size());
  ExecSpace space;
  for (auto [first, last] : {std::pair{0, 2}, std::pair{2, 3}, std::pair{3, layers}}) {
    memory::Meter meter;
    {
      Chunk<T, A> chunk(desc, first, last, 2, recompute);
      chunk.params().initialize(space, 5);
      const int a = chunk.acquire(), b = chunk.acquire();
      for (int slot : {a, b}) {
        if (chunk.first()) Kokkos::deep_copy(chunk.tokens(slot), Token(slot + 1));
        if (chunk.last()) Kokkos::deep_copy(chunk.targets(slot), Token(3));
        if (!chunk.first()) Kokkos::deep_copy(chunk.input(slot), A(0.25f));
        if (!chunk.last()) Kokkos::deep_copy(chunk.output_grad(slot), A(0.5f));
        chunk.forward(space, slot);
      }
      chunk.backward_input(space, a, T(0.1));
      chunk.backward_input(space, b, T(0.1));
      chunk.backward_weight(space, a);
      chunk.backward_weight(space, b);
      space.fence();
      const ChunkBytes want = chunk_bytes<T, A>(desc, first, last, 2, recompute);
      const memory::Bytes got = meter.live();
      const std::int64_t params = want.parameters / std::int64_t(sizeof(T));
      const std::string where = fmt::format("{} chunk [{}, {}), recompute {}", type_name<A>(), first, last,
                                            to_string(recompute));
      EXPECT_EQ(got[int(memory::Category::parameters)], want.parameters + want.compute_copy) << where;
      EXPECT_EQ(got[int(memory::Category::gradients)], params * std::int64_t(sizeof(T))) << where;
      EXPECT_EQ(got[int(memory::Category::optimizer)], params * (2 * std::int64_t(sizeof(T)) + 1)) << where;
      EXPECT_EQ(got[int(memory::Category::activations)], 2 * want.slot) << where;
      EXPECT_EQ(got[int(memory::Category::backward)], 2 * want.backward_set) << where;
      EXPECT_EQ(got[int(memory::Category::workspaces)], want.workspace) << where;
      EXPECT_EQ(want.message, chunk.rows() * c.d_model * std::int64_t(sizeof(A))) << where;
    }
  }
}

TEST(MixedPrecision, ChunkAllocatesWhatChunkBytesPredicts) {
  for (auto recompute : {nn::Recompute::none, nn::Recompute::block}) {
    expect_allocations_predicted<float, float>(recompute);
    expect_allocations_predicted<float, bf16>(recompute);
  }
}

// Attention keeps per query row two statistics, not the T x T probabilities, and its work buffers hold one block
// of query rows: a middle chunk's slot, backward buffers and workspaces grow linearly with the sequence (the
// tiny model at 512 and 2048 tokens; at 2048, [B, H, T, T] would be 64 MiB a block per sequence in float).
TEST(MixedPrecision, AttentionMemoryIsLinearInTheSequenceLength) {
  ModelConfig c;
  c.n_layers = 4;
  c.seq_len = 512;
  const auto short_bytes = chunk_bytes<float, bf16>(describe(c), 1, 3, 4);
  c.seq_len = 2048;
  const auto long_bytes = chunk_bytes<float, bf16>(describe(c), 1, 3, 4);
  EXPECT_EQ(long_bytes.slot, 4 * short_bytes.slot);
  EXPECT_EQ(long_bytes.backward_set, 4 * short_bytes.backward_set);
  // Workspaces also hold fixed-size terms (the host products' widened operands of a block): at most linear.
  EXPECT_LE(long_bytes.workspace, 4 * short_bytes.workspace);
  EXPECT_GT(long_bytes.workspace, 3 * short_bytes.workspace);
}

// bf16 halves what a micro-batch keeps and sends, not the logits (float: the head's slot keeps them whole).
TEST(MixedPrecision, Bf16HalvesActivationsAndMessages) {
  ModelConfig c;
  c.n_layers = 4;
  const auto desc = describe(c);
  const auto fp32 = chunk_bytes<float, float>(desc, 1, 3, 4), bf16_bytes = chunk_bytes<float, bf16>(desc, 1, 3, 4);
  EXPECT_EQ(2 * bf16_bytes.message, fp32.message);
  // A middle chunk's slot (two blocks): activations in A; in float, the LayerNorm statistics (4 per row) and the
  // softmax's (2 per row and head).
  const std::int64_t rows = 4 * c.seq_len;
  const std::int64_t statistics = 2 * (4 + 2 * c.n_heads) * rows * std::int64_t(sizeof(float));
  EXPECT_EQ(2 * (bf16_bytes.slot - statistics), fp32.slot - statistics);
  EXPECT_EQ(2 * bf16_bytes.backward_set, fp32.backward_set);
}

}  // namespace mixed_precision_test
}  // namespace kpipe::model
