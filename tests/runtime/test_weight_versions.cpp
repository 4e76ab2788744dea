// A chunk's weight versions are bound without copying: the layers read the bound version's own buffers
// (values and, under bf16, its compute copy), a micro-batch run on a version gives the same bits whatever
// was bound in between, an update writes the next version in place when nothing reads the newest any more
// and beside it otherwise, and the pool allocates only the versions beyond the chunk's own buffers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/runtime/weight_versions.hpp"

namespace kpipe::runtime {
namespace {

model::ModelDesc tiny_desc() {
  ModelConfig c;
  c.seq_len = 8;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 2;
  return model::describe(c);
}

// The whole model as one chunk with one micro-batch's tokens in slot 0.
template <class A> struct Model {
  model::ModelDesc desc = tiny_desc();
  ExecSpace space;
  model::Chunk<float, A> chunk{desc, 0, int(desc.layers.size()), 2};
  int slot = chunk.acquire();

  Model() {
    chunk.params().initialize(space, 7);
    auto tokens = Kokkos::create_mirror_view(chunk.tokens(slot));
    auto targets = Kokkos::create_mirror_view(chunk.targets(slot));
    for (std::size_t i = 0; i < tokens.extent(0); ++i) {
      tokens(i) = Token((i * 37 + 5) % 256);
      targets(i) = Token((i * 11 + 3) % 256);
    }
    Kokkos::deep_copy(chunk.tokens(slot), tokens);
    Kokkos::deep_copy(chunk.targets(slot), targets);
  }
  double loss() {
    chunk.forward(space, slot);
    return chunk.loss_sum(space, slot);
  }
  const float* values() const { return chunk.params().values().data(); }
};

// Writes the next version as an update would: the newest's weights, every one scaled (and its compute copy).
template <class A> void write_scaled(Model<A>& model, const View1<const float>& from, float factor) {
  const View1<float> into = model.chunk.params().values();
  Kokkos::parallel_for("kpipe::tests::scaled", range(model.space, into.extent(0)),
                       KOKKOS_LAMBDA(std::int64_t i) { into(i) = factor * from(i); });
  model.chunk.params().refresh_compute_copy(model.space);
  model.space.fence();
}

template <class A> void expect_versions_bound_without_copies() {
  const std::string what = type_name<A>();
  Model<A> model;
  const float* const own = model.values();
  WeightVersions<float, A> versions(model.space, model.chunk);
  EXPECT_EQ(model.values(), own) << what << ": the chunk's buffers are version 0";
  EXPECT_EQ(versions.allocated(), 0) << what;
  const double loss0 = model.loss();

  // Version 1 while version 0 is still read: written beside it, in the pool's first buffer.
  const View1<const float> from = versions.advance(1, [](int) { return true; });
  EXPECT_EQ(from.data(), own) << what << ": the update reads the newest's buffers";
  EXPECT_NE(model.values(), own) << what << ": and writes the next version apart";
  EXPECT_EQ(versions.allocated(), 1) << what;
  write_scaled(model, from, 0.5f);
  const float* const second = model.values();
  const double loss1 = model.loss();
  EXPECT_NE(loss1, loss0) << what << ": the layers read version 1";

  // Switching is pointing: the layers read each version's own buffers, the same bits every time.
  for (int round = 0; round < 2; ++round) {
    versions.bind(0);
    EXPECT_EQ(model.values(), own) << what;
    EXPECT_EQ(model.loss(), loss0) << what << " round " << round;
    versions.bind(1);
    EXPECT_EQ(model.values(), second) << what;
    EXPECT_EQ(model.loss(), loss1) << what << " round " << round;
  }

  // Version 2 once nothing reads 0 or 1: version 0 goes back to the pool, and 2 is written over 1, in place.
  versions.bind(0);
  const View1<const float> newest = versions.advance(2, [](int) { return false; });
  EXPECT_EQ(newest.data(), second) << what;
  EXPECT_EQ(model.values(), second) << what << ": in place";
  write_scaled(model, newest, 2.0f);
  EXPECT_EQ(versions.held(), 1) << what;
  EXPECT_FALSE(versions.holds(0)) << what;
  EXPECT_EQ(versions.peak(), 2) << what;
  EXPECT_EQ(versions.allocated(), 1) << what << ": never more buffers than versions held at once, less one";
  const double loss2 = model.loss();

  // Version 3 beside 2 takes the buffer version 0 gave back: no allocation.
  const View1<const float> kept = versions.advance(3, [](int v) { return v == 2; });
  EXPECT_EQ(kept.data(), second) << what;
  EXPECT_EQ(model.values(), own) << what << ": the buffer version 0 gave back";
  write_scaled(model, kept, 1.0f);
  EXPECT_EQ(versions.allocated(), 1) << what;
  EXPECT_EQ(model.loss(), loss2) << what << ": version 3 holds version 2's weights";
  EXPECT_EQ(versions.host_copy(2), versions.host_copy(3)) << what;

  // Resuming: the chunk's weights as they are become the newest, older ones are held from host values.
  const std::vector<float> older = versions.host_copy(2);
  versions.restart(9, {{8, older.data()}});
  EXPECT_EQ(versions.newest(), 9) << what;
  EXPECT_TRUE(versions.holds(8)) << what;
  EXPECT_EQ(versions.held(), 2) << what;
  versions.bind(8);
  EXPECT_EQ(model.loss(), loss2) << what << ": the older version, its compute copy rounded from its values";
  EXPECT_THROW(versions.bind(3), std::logic_error) << what << ": version 3 is not held any more";
}

TEST(WeightVersions, BoundWithoutCopies) { expect_versions_bound_without_copies<float>(); }
TEST(WeightVersions, BoundWithoutCopiesWithBf16ComputeCopies) { expect_versions_bound_without_copies<bf16>(); }

}  // namespace
}  // namespace kpipe::runtime
