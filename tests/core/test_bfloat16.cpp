// bf16 conversions: float -> bf16 rounds to nearest, ties to even, as IEEE 754 does (checked against an
// independent reference that picks the nearer of the two bf16 neighbours in double), with the special
// values (NaN, infinities, signed zeros, subnormals); bf16 -> float is exact; a kernel on the execution
// space gives the same bits as the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe {
namespace test {

// rounded = bf16(in), back = float(rounded), in a kernel (a free function in a named namespace: CUDA takes no
// device lambda in a test body, a private member, nor in an anonymous namespace).
void round_trip(const View1<const float>& in, const View1<bf16>& rounded, const View1<float>& back) {
  Kokkos::parallel_for("kpipe::test::bf16_round_trip", range(ExecSpace(), in.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
    rounded(i) = narrow<bf16>(in(i));
    back(i) = widen<float>(rounded(i));
  });
}

}  // namespace test

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The nearest bf16 to a finite float by exhaustion of its two neighbours, compared in double (exact for
// floats): the bf16 at or below |x| (x's upper half) and the next one up; on a tie, the even one.
std::uint16_t reference_bits(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t sign = u & 0x80000000u, magnitude = u & 0x7fffffffu;
  const std::uint32_t low = magnitude & 0xffff0000u, high = low + 0x10000u;  // high may be infinity's pattern
  const double a = std::abs(double(x)), lo = double(float_of(low));
  // Past the largest bf16 the next value up is 2^128 (IEEE rounds to infinity from the midpoint to it).
  const double hi = high >= 0x7f800000u ? std::ldexp(1.0, 128) : double(float_of(high));
  std::uint32_t pick;
  if (a - lo < hi - a) pick = low;
  else if (a - lo > hi - a) pick = high;
  else pick = ((low >> 16) & 1u) == 0 ? low : high;
  return std::uint16_t((sign | pick) >> 16);
}

TEST(BFloat16, EveryBf16IsAFloatExactlyAndComesBackUnchanged) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const bf16 h = bf16::from_bits(std::uint16_t(b));
    const float x = float(h);
    ASSERT_EQ(bits_of(x), b << 16) << "widening must be exact: bits " << b;
    if (std::isnan(x)) continue;  // NaNs: see NaNStayNaNs
    ASSERT_EQ(bf16(x).bits, b) << "a bf16 value must round to itself: bits " << b;
  }
}

TEST(BFloat16, RoundsToNearestEvenLikeAnIndependentReference) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> any;
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float x = float_of(any(gen));
    if (std::isnan(x)) continue;
    ASSERT_EQ(bf16(x).bits, reference_bits(x)) << "x = " << x << " (bits " << std::hex << bits_of(x) << ")";
    ++checked;
  }
  // Every dropped half that decides a rounding: just below, at and just above one half, and the ends.
  for (std::uint32_t upper : {0x3f80u, 0x3f81u, 0x0001u, 0x007fu, 0x0080u, 0x7f7fu, 0x4b00u})
    for (std::uint32_t lower : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        const float x = float_of(sign | (upper << 16) | lower);
        ASSERT_EQ(bf16(x).bits, reference_bits(x)) << std::hex << bits_of(x);
        ++checked;
      }
  EXPECT_GT(checked, 1000000);
}

TEST(BFloat16, TiesGoToTheEvenNeighbour) {
  // 1 + 2^-8 lies halfway between 1 (even significand) and 1 + 2^-7 (odd): down to 1.
  EXPECT_EQ(float(bf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(float(bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // Off the tie by the least float step, the nearer neighbour wins either way.
  EXPECT_EQ(float(bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f))), 1.0f + 0x1p-7f);
  EXPECT_EQ(float(bf16(std::nextafter(1.0f + 3 * 0x1p-8f, 0.0f))), 1.0f + 0x1p-7f);
  EXPECT_EQ(float(bf16(-1.0f - 0x1p-8f)), -1.0f);  // symmetric in the sign
}

TEST(BFloat16, NaNStayNaNs) {
  const float quiet = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(float(bf16(quiet))));
  EXPECT_TRUE(std::isnan(float(bf16(-quiet))));
  EXPECT_TRUE(std::signbit(float(bf16(-quiet))));
  // Payload in the dropped half only: truncation would give infinity, rounding would carry into the sign.
  for (std::uint32_t u : {0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu, 0xffffffffu, 0x7fbfffffu}) {
    const float r = float(bf16(float_of(u)));
    EXPECT_TRUE(std::isnan(r)) << std::hex << u;
    EXPECT_EQ(std::signbit(r), (u >> 31) != 0) << std::hex << u;
  }
}

TEST(BFloat16, InfinitiesZerosAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float(bf16(inf)), inf);
  EXPECT_EQ(float(bf16(-inf)), -inf);
  EXPECT_EQ(bf16(0.0f).bits, 0x0000u);
  EXPECT_EQ(bf16(-0.0f).bits, 0x8000u);
  // The largest bf16 is (2 - 2^-7) 2^127; from the midpoint to 2^128, (2 - 2^-8) 2^127, on, IEEE rounds to
  // infinity (the midpoint's even neighbour is 2^128 itself).
  const float largest = float(bf16::from_bits(0x7f7fu));
  EXPECT_EQ(largest, (2.0f - 0x1p-7f) * 0x1p127f);
  EXPECT_EQ(float(bf16(std::numeric_limits<float>::max())), inf);
  EXPECT_EQ(float(bf16((2.0f - 0x1p-8f) * 0x1p127f)), inf);
  EXPECT_EQ(float(bf16(std::nextafter((2.0f - 0x1p-8f) * 0x1p127f, 0.0f))), largest);
  EXPECT_EQ(float(bf16(-std::numeric_limits<float>::max())), -inf);
}

TEST(BFloat16, SubnormalsRoundLikeAnyOtherValue) {
  const float tiniest = float(bf16::from_bits(0x0001u));  // 2^-133, bf16's least subnormal
  EXPECT_EQ(tiniest, 0x1p-133f);
  EXPECT_EQ(float(bf16(0x1p-133f)), 0x1p-133f);
  EXPECT_EQ(float(bf16(0x1p-134f)), 0.0f);                  // half the least: a tie, to even (zero)
  EXPECT_EQ(float(bf16(0x1p-134f + 0x1p-149f)), 0x1p-133f);  // just above half: up
  EXPECT_EQ(float(bf16(1.5f * 0x1p-133f)), 0x1p-132f);      // tie between 1 (odd) and 2 (even) units: 2
  EXPECT_EQ(float(bf16(std::numeric_limits<float>::denorm_min())), 0.0f);
  EXPECT_EQ(float(bf16(-std::numeric_limits<float>::denorm_min())), -0.0f);
  EXPECT_TRUE(std::signbit(float(bf16(-std::numeric_limits<float>::denorm_min()))));
  // The largest subnormal float rounds up to the least normal bf16, 2^-126.
  EXPECT_EQ(float(bf16(float_of(0x007fffffu))), 0x1p-126f);
}

TEST(BFloat16, WidenAndNarrowAreTheIdentityWithoutBf16) {
  for (float x : {0.1f, -3.75e-20f, 1e30f, std::numeric_limits<float>::denorm_min()}) {
    EXPECT_EQ(bits_of(narrow<float>(x)), bits_of(x));
    EXPECT_EQ(bits_of(widen<float>(x)), bits_of(x));
    EXPECT_EQ(widen<double>(double(x)), double(x));
    EXPECT_EQ(narrow<double>(double(x) / 3), double(x) / 3);
  }
  EXPECT_EQ(narrow<bf16>(1.0f + 0x1p-8f).bits, bf16(1.0f).bits);
  EXPECT_EQ(widen<float>(bf16::from_bits(0x3fc0u)), 1.5f);
  EXPECT_EQ(widen<double>(bf16::from_bits(0xbfc0u)), -1.5);
}

// The conversions in a kernel (on the GPU in CUDA builds) give the host's bits.
TEST(BFloat16, KernelsConvertToTheSameBitsAsTheHost) {
  std::mt19937 gen(11);
  std::uniform_int_distribution<std::uint32_t> any;
  const int n = 1 << 16;
  Kokkos::View<float*, HostSpace> host_in("in", n);
  for (int i = 0; i < n; ++i) host_in(i) = float_of(any(gen));
  host_in(0) = float_of(0x7f800001u);  // NaN with its payload below
  host_in(1) = std::numeric_limits<float>::max();
  host_in(2) = 1.0f + 0x1p-8f;
  const auto in = Kokkos::create_mirror_view_and_copy(MemSpace(), host_in);
  View1<bf16> rounded("rounded", n);
  View1<float> back("back", n);
  test::round_trip(in, rounded, back);
  const auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), rounded);
  const auto got_back = Kokkos::create_mirror_view_and_copy(HostSpace(), back);
  for (int i = 0; i < n; ++i) {
    const float x = host_in(i);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(got_back(i))) << i;
      continue;
    }
    ASSERT_EQ(got(i).bits, bf16(x).bits) << "element " << i;
    ASSERT_EQ(bits_of(got_back(i)), std::uint32_t(got(i).bits) << 16) << "element " << i;
  }
}

}  // namespace
}  // namespace kpipe
