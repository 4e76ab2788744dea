// The device hash of a buffer (core/order_free_hash.hpp): the sum of its elements' terms, whatever the order;
// any one changed element changes it; parts keyed by their place add up to the whole.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/order_free_hash.hpp"

namespace kpipe {
namespace {

View1<float> device_copy(const std::vector<float>& host) {
  View1<float> view("test::values", host.size());
  Kokkos::deep_copy(view, Kokkos::View<const float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              host.data(), host.size()));
  return view;
}

std::vector<float> some_values(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.001f * float(i % 977) - 0.3f;
  return v;
}

std::uint64_t hash_of(const std::vector<float>& host, std::uint64_t first_key = 0, std::uint64_t step = 1) {
  const auto view = device_copy(host);
  return order_free_hash(ExecSpace(), view.data(), std::int64_t(host.size()), first_key, step);
}

TEST(OrderFreeHash, IsTheSumOfTheTermsInAnyOrder) {
  const auto values = some_values(10001);  // blocks of the host path and a ragged last one
  std::uint64_t backwards = 0;
  for (std::size_t i = values.size(); i-- > 0;) {
    std::uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    backwards += mix_element(7 + 3 * std::uint64_t(i), bits);
  }
  EXPECT_EQ(hash_of(values, 7, 3), backwards);
  EXPECT_EQ(hash_of({}), 0u);
}

TEST(OrderFreeHash, AnyOneFlippedBitChangesIt) {
  auto values = some_values(4099);
  const std::uint64_t clean = hash_of(values);
  for (const std::size_t i : {std::size_t(0), std::size_t(2048), std::size_t(4098)})
    for (int bit = 0; bit < 32; ++bit) {
      std::uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      bits ^= 1u << bit;
      auto flipped = values;
      std::memcpy(&flipped[i], &bits, sizeof bits);
      EXPECT_NE(hash_of(flipped), clean) << "element " << i << " bit " << bit;
    }
  // The same bit flipped the other way in two elements (a plain sum of the bits would not see it).
  auto two = values;
  std::uint32_t a, b;
  std::memcpy(&a, &two[10], 4);
  std::memcpy(&b, &two[20], 4);
  ASSERT_NE(a & 1u, b & 1u);
  a ^= 1u;
  b ^= 1u;
  std::memcpy(&two[10], &a, 4);
  std::memcpy(&two[20], &b, 4);
  EXPECT_NE(hash_of(two), clean);
  // Two elements swapped: the keys place them.
  auto swapped = values;
  std::swap(swapped[1], swapped[2]);
  EXPECT_NE(hash_of(swapped), clean);
}

// The copying form gives the same hash and an exact copy (a checkpoint's snapshot relies on both).
TEST(OrderFreeHash, HashingWhileCopyingGivesTheSameHashAndTheBytes) {
  if constexpr (!Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible) {
    GTEST_SKIP() << "order_free_hash_copy copies into host memory: host builds only";
  } else {
    const auto values = some_values(10001);
    const auto view = device_copy(values);
    std::vector<float> copy(values.size(), -1.0f);
    EXPECT_EQ(order_free_hash_copy(ExecSpace(), view.data(), copy.data(), std::int64_t(values.size()), 7, 3),
              hash_of(values, 7, 3));
    EXPECT_EQ(std::memcmp(copy.data(), values.data(), values.size() * sizeof(float)), 0);
  }
}

TEST(OrderFreeHash, PartsKeyedByTheirPlaceAddUpToTheWhole) {
  const auto values = some_values(5000);
  const std::vector<float> head(values.begin(), values.begin() + 1234), tail(values.begin() + 1234, values.end());
  EXPECT_EQ(hash_of(head, 5, 2) + hash_of(tail, 5 + 2 * 1234, 2), hash_of(values, 5, 2));
}

TEST(OrderFreeHash, HashesTheStoredBitsOfEveryStorageType) {
  View1<bf16> half("test::half", 3);
  View1<double> wide("test::wide", 3);
  Kokkos::deep_copy(half, bf16(1.5f));
  Kokkos::deep_copy(wide, 1.5);
  EXPECT_EQ(order_free_hash(ExecSpace(), half.data(), 3, 0, 1),
            mix_element(0, bf16(1.5f).bits) + mix_element(1, bf16(1.5f).bits) + mix_element(2, bf16(1.5f).bits));
  std::uint64_t bits;
  const double x = 1.5;
  std::memcpy(&bits, &x, sizeof bits);
  EXPECT_EQ(order_free_hash(ExecSpace(), wide.data(), 3, 0, 1),
            mix_element(0, bits) + mix_element(1, bits) + mix_element(2, bits));
}

}  // namespace
}  // namespace kpipe
