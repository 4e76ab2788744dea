#include <gtest/gtest.h>

#include <cmath>

#include "kpipe/core/hash.hpp"
#include "kpipe/model/chunk.hpp"
#include "support/gradcheck.hpp"

namespace kpipe::model {
namespace {

ModelConfig tiny_model() {
  ModelConfig c;
  c.seq_len = 5;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  c.init_std = 0.3;  // large enough that every path carries gradient a finite difference can see
  return c;
}

template <class T> void fill_tokens(Chunk<T>& chunk, int slot, std::uint64_t seed) {
  auto tokens = Kokkos::create_mirror_view(chunk.tokens(slot));
  auto targets = Kokkos::create_mirror_view(chunk.targets(slot));
  for (std::size_t i = 0; i < tokens.extent(0); ++i) {
    tokens(i) = Token((i * 37 + seed * 11) % 256);
    targets(i) = Token((i * 53 + seed * 7 + 3) % 256);
  }
  Kokkos::deep_copy(chunk.tokens(slot), tokens);
  Kokkos::deep_copy(chunk.targets(slot), targets);
}

TEST(Model, WholeTwoBlockModelGradientsMatchFiniteDifferences) {
  const auto desc = describe(tiny_model());
  Chunk<double> chunk(desc, 0, int(desc.layers.size()), 2);
  ExecSpace space;
  chunk.params().initialize(space, 7);
  const int slot = chunk.acquire();
  fill_tokens(chunk, slot, 1);
  const double scale = 1.0 / double(chunk.rows());
  auto loss = [&] {
    chunk.forward(space, slot);
    return chunk.loss_sum(space, slot) * scale;
  };
  loss();
  chunk.backward_input(space, slot, scale);
  chunk.backward_weight(space, slot);
  auto& p = chunk.params();
  // Every tensor of every layer, a few elements each.
  for (const auto& s : p.slots()) {
    const View1<double> values(p.values().data() + s.offset, s.spec->numel());
    const View1<double> grads(p.grads().data() + s.offset, s.spec->numel());
    test::expect_gradient(s.path(), values, grads, loss, 6, 1e-5, 1e-4, 1e-9);
  }
}

// Gradient hash after two micro-batches through a whole-model chunk, with the backwards in the given order:
// "plain" runs I then W per micro-batch, "split" both I's before both W's (as zero-bubble schedules do).
std::uint64_t two_microbatch_gradients(nn::Recompute recompute, bool split, int* backward_sets = nullptr) {
  const auto desc = describe(tiny_model());
  ExecSpace space;
  Chunk<float> chunk(desc, 0, int(desc.layers.size()), 2, recompute);
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
  if (backward_sets) *backward_sets = chunk.allocated_backward_sets();
  auto grads = Kokkos::create_mirror_view_and_copy(HostSpace(), chunk.params().grads());
  double norm = 0;
  for (std::size_t i = 0; i < grads.span(); ++i) norm += std::abs(grads(i));
  EXPECT_GT(norm, 0.0) << "the comparison is not between zeros";
  return xxh64(grads.data(), grads.span() * sizeof(float));
}

// Backward buffers come from a pool: plain backwards need one set, split ones one per micro-batch between
// its I and its W; the gradients are the same bits either way.
TEST(Model, BackwardBuffersArePooledBetweenInputAndWeightGradients) {
  int plain_sets = 0, split_sets = 0;
  const auto plain = two_microbatch_gradients(nn::Recompute::none, false, &plain_sets);
  const auto split = two_microbatch_gradients(nn::Recompute::none, true, &split_sets);
  EXPECT_EQ(plain, split);
  EXPECT_EQ(plain_sets, 1);
  EXPECT_EQ(split_sets, 2);
}

// Recomputation changes what is kept, not a bit of the result, with plain and with split backwards (where
// the recomputed activations backward_weight reads must survive the other micro-batch's backward_input).
TEST(Model, RecomputationGivesTheSameGradientsBitForBit) {
  const auto reference = two_microbatch_gradients(nn::Recompute::none, false);
  for (auto mode : {nn::Recompute::attention, nn::Recompute::mlp, nn::Recompute::block})
    for (bool split : {false, true})
      EXPECT_EQ(two_microbatch_gradients(mode, split), reference) << to_string(mode) << (split ? " split" : "");
}

// Misuse is refused, not silently wrong: a W without its I, a second I before the W.
TEST(Model, BackwardWeightNeedsItsBackwardInput) {
  const auto desc = describe(tiny_model());
  ExecSpace space;
  Chunk<float> chunk(desc, 0, int(desc.layers.size()), 2);
  chunk.params().initialize(space, 7);
  const int a = chunk.acquire();
  fill_tokens(chunk, a, 1);
  chunk.forward(space, a);
  EXPECT_THROW(chunk.backward_weight(space, a), std::logic_error);
  chunk.backward_input(space, a, 0.1f);
  EXPECT_THROW(chunk.backward_input(space, a, 0.1f), std::logic_error);
  chunk.backward_weight(space, a);
  EXPECT_THROW(chunk.backward_weight(space, a), std::logic_error);
}

TEST(Model, LossAtInitializationIsNearUniform) {
  ModelConfig c;  // the tiny preset's model
  const auto desc = describe(c);
  Chunk<float> chunk(desc, 0, int(desc.layers.size()), 4);
  ExecSpace space;
  chunk.params().initialize(space, 1234);
  const int slot = chunk.acquire();
  fill_tokens(chunk, slot, 3);
  chunk.forward(space, slot);
  const double loss = chunk.loss_sum(space, slot) / double(chunk.rows());
  EXPECT_NEAR(loss, std::log(256.0), 0.1);
}

TEST(Model, InitializationDoesNotDependOnTheCut) {
  ModelConfig c;
  c.n_layers = 3;
  const auto desc = describe(c);
  const int layers = int(desc.layers.size());
  ExecSpace space;
  Chunk<float> whole(desc, 0, layers, 1);
  whole.params().initialize(space, 99);
  const auto expected = tensor_hashes(whole.params());
  std::vector<std::uint64_t> pieces;
  for (auto [first, last] : {std::pair{0, 2}, std::pair{2, 3}, std::pair{3, layers}}) {
    Chunk<float> part(desc, first, last, 1);
    part.params().initialize(space, 99);
    for (auto h : tensor_hashes(part.params())) pieces.push_back(h);
  }
  EXPECT_EQ(pieces, expected);
  Chunk<float> other(desc, 0, layers, 1);
  other.params().initialize(space, 100);
  EXPECT_NE(combine_hashes(tensor_hashes(other.params())), combine_hashes(expected));
}

TEST(Model, DescriptionCountsParameters) {
  ModelConfig c;
  c.n_layers = 8;
  c.d_model = 256;
  c.n_heads = 8;
  c.seq_len = 128;
  const auto desc = describe(c);
  const std::int64_t C = 256, V = 256, T = 128, F = 1024;
  const std::int64_t block = 2 * 2 * C + 3 * C * C + 3 * C + C * C + C + C * F + F + F * C + C;
  EXPECT_EQ(desc.num_params(), V * C + T * C + 8 * block + 2 * C + V * C);
  EXPECT_EQ(int(desc.layers.size()), 10);
  EXPECT_EQ(desc.layers[3].path(), "layers/03");
  EXPECT_GT(desc.layers[1].forward_flops, 2.0 * T * 12 * C * C);
  // Counted without describing every block: the same figure, and one for a model too large to describe.
  EXPECT_EQ(parameter_count(c), double(desc.num_params()));
  c.n_layers = 1000000000;
  EXPECT_DOUBLE_EQ(parameter_count(c), double(V * C + T * C + 2 * C + V * C) + 1e9 * double(block));
}

}  // namespace
}  // namespace kpipe::model
