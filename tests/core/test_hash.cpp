// The byte hashes (core/hash.hpp): XXH64 as every xxHash library computes it, whatever the pieces it is given
// in; kpipe's FNV-1a 64 (the hash older checkpoints carry) as its definition gives it with kpipe's basis.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "kpipe/core/hash.hpp"

namespace kpipe {
namespace {

std::string counting_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = char(i % 256);
  return s;
}

// Values from the xxHash reference implementation (Python's xxhash 3.x, xxh64_intdigest), covering each path
// of the algorithm: empty, under 4, under 8 and under 32 bytes (no rounds), exactly one round, a round and a
// tail of 8 + 4 + 1 bytes, many rounds; and a seed.
TEST(Xxh64, EqualsTheReferenceImplementation) {
  EXPECT_EQ(xxh64(std::string_view("")), 0xef46db3751d8e999ull);
  EXPECT_EQ(xxh64(std::string_view("a")), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(xxh64(std::string_view("abc")), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(xxh64(std::string(31, 'x')), 0x60dd0d01083b99f0ull);
  EXPECT_EQ(xxh64(std::string(32, 'x')), 0xe2df261fc2ec30ebull);
  EXPECT_EQ(xxh64(std::string(33, 'x')), 0xb3fa465f554208a6ull);
  EXPECT_EQ(xxh64(counting_bytes(768)), 0x8e03c838c596036full);
  EXPECT_EQ(xxh64(std::string_view("abc"), 7), 0x9e755206156676d7ull);
}

TEST(Xxh64, PiecesOfAnySizesGiveTheWholesHash) {
  const std::string bytes = counting_bytes(1000) + std::string(45, 'q');
  const std::uint64_t whole = xxh64(bytes);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    Xxh64 hash;
    for (std::size_t at = 0; at < bytes.size();) {
      const std::size_t piece = std::min<std::size_t>(bytes.size() - at, rng() % 70);  // 0 too
      hash.update(bytes.data() + at, piece);
      at += piece;
    }
    ASSERT_EQ(hash.digest(), whole) << "trial " << trial;
  }
}

TEST(Xxh64, EveryFlippedBitChangesIt) {
  std::string bytes = counting_bytes(300);
  const std::uint64_t intact = xxh64(bytes);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] = char(bytes[i] ^ (1 << bit));
      ASSERT_NE(xxh64(bytes), intact) << "byte " << i << " bit " << bit;
      bytes[i] = char(bytes[i] ^ (1 << bit));
    }
  EXPECT_NE(xxh64(bytes.substr(0, 299)), intact);  // a truncation
  EXPECT_NE(xxh64(bytes + '\0'), intact);           // a trailing zero
}

TEST(Fnv1a64, EqualsItsDefinition) {
  EXPECT_EQ(fnv1a64(std::string_view("")), fnv1a64_basis);
  // (h ^ byte) * 1099511628211 from the basis; kpipe's basis is a digit short of FNV's published
  // 14695981039346656037, which gives 0xaf63dc4c8601ec8c here.
  EXPECT_EQ(fnv1a64(std::string_view("a")), 0x44bd8ad473cd9906ull);
  EXPECT_EQ(fnv1a64(std::string_view("bc"), fnv1a64(std::string_view("a"))), fnv1a64(std::string_view("abc")));
  EXPECT_EQ(hash_bytes(ByteHash::fnv1a64, "abc"), fnv1a64(std::string_view("abc")));
  EXPECT_EQ(hash_bytes(ByteHash::xxh64, "abc"), xxh64(std::string_view("abc")));
  EXPECT_STREQ(to_string(ByteHash::xxh64), "xxh64");
  EXPECT_STREQ(to_string(ByteHash::fnv1a64), "fnv1a64");
}

}  // namespace
}  // namespace kpipe
