// Sizes as people write them, and back.
#include <gtest/gtest.h>

#include "kpipe/core/bytes.hpp"

namespace kpipe {
namespace {

TEST(Bytes, ParsesUnitsAndPlainNumbers) {
  EXPECT_EQ(parse_bytes("123456"), 123456);
  EXPECT_EQ(parse_bytes("2e9"), 2000000000);
  EXPECT_EQ(parse_bytes("512MiB"), 512ll << 20);
  EXPECT_EQ(parse_bytes("6GiB"), 6ll << 30);
  EXPECT_EQ(parse_bytes("6G"), 6ll << 30);
  EXPECT_EQ(parse_bytes("1.5 GiB"), 3ll << 29);
  EXPECT_EQ(parse_bytes("2.5GB"), 2500000000);
  EXPECT_EQ(parse_bytes("10kB"), 10000);
  EXPECT_EQ(parse_bytes("0"), 0);
  for (const char* bad : {"", "GiB", "-1", "5 parsecs", "1e30", "nan", "inf"}) EXPECT_FALSE(parse_bytes(bad)) << bad;
}

TEST(Bytes, FormatsInBinaryUnits) {
  EXPECT_EQ(format_bytes(812), "812 B");
  EXPECT_EQ(format_bytes(3328), "3.25 KiB");
  EXPECT_EQ(format_bytes(3ll << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(200ll << 20), "200 MiB");
  EXPECT_EQ(format_bytes(*parse_bytes(format_bytes(40ll << 20))), "40.0 MiB");
  // Estimates beyond 64 bits: a model of 10^9 layers.
  EXPECT_EQ(format_estimated_bytes(3.0 * (1ll << 29)), "1.50 GiB");
  EXPECT_EQ(format_estimated_bytes(8e13), "72.8 TiB");
  EXPECT_EQ(format_estimated_bytes(1e21), "867 EiB");
}

}  // namespace
}  // namespace kpipe
