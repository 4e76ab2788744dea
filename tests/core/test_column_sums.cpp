// The two-level column sums (core/column_sums.hpp): the grouping is a function of the row count alone, both
// kernel paths give the same bits, and those bits are the documented order's (each group's rows in order, then
// the groups in order), computed here on the host by plain loops.
#include <gtest/gtest.h>

#include <vector>

#include "kpipe/core/column_sums.hpp"
#include "support/gradcheck.hpp"

namespace kpipe {

// Kernels go in free functions (CUDA refuses extended lambdas in a test's private TestBody).
// out(j, 0) += sum_i x(i, j), out(j, 1) += sum_i x(i, j) * x(i, j), on path P.
template <KernelPath P> void sums_and_squares(const View2<const float>& x, const View2<float>& out) {
  column_sums<float, 2, P>(
      "kpipe::test::column_sums", ExecSpace(), x.extent(0), x.extent(1),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
        const float v = x(i, j);
        return ColumnTerms<float, 2>{{v, v * v}};
      },
      KOKKOS_LAMBDA(std::int64_t j, const ColumnTerms<float, 2>& s) {
        out(j, 0) += s[0];
        out(j, 1) += s[1];
      });
}

namespace {

TEST(ColumnSums, GroupingDependsOnTheRowsAlone) {
  EXPECT_EQ(column_groups(0).groups, 0);
  EXPECT_EQ(column_groups(1).groups, 1);
  EXPECT_EQ(column_groups(128).groups, 1);
  EXPECT_EQ(column_groups(129).groups, 2);
  // The wide model's micro-batch (32 sequences of 256): 64 groups of 128 rows, 65,536 work items at 1024 columns.
  EXPECT_EQ(column_groups(8192).group_rows, 128);
  EXPECT_EQ(column_groups(8192).groups, 64);
  // Past 256 groups the groups grow instead: at most column_group_max of them, covering every row once.
  for (std::int64_t rows : {32768, 32769, 65536, 1000003}) {
    const ColumnGroups g = column_groups(rows);
    EXPECT_LE(g.groups, column_group_max) << rows;
    EXPECT_GE(g.group_rows * g.groups, rows) << rows;
    EXPECT_LT(g.group_rows * (g.groups - 1), rows) << rows;
  }
  EXPECT_EQ(column_groups(32769).group_rows, 129);
}

// Rows across several groups with a short last one (and, for the larger case, groups longer than the minimum),
// columns off both the host block (64) and the device tile (8).
class ColumnSumsShapes : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(ColumnSumsShapes, BothPathsGiveTheDocumentedOrdersBits) {
  const auto [rows, cols] = GetParam();
  View2<float> x("x", rows, cols);
  test::fill_uniform(x, 3, -2.0, 3.0);
  View2<float> out_h("out", cols, 2), out_d("out", cols, 2);
  Kokkos::deep_copy(out_h, 0.5f);  // the sums are added to what is there (gradients accumulate)
  Kokkos::deep_copy(out_d, 0.5f);
  sums_and_squares<KernelPath::host>(x, out_h);
  sums_and_squares<KernelPath::device>(x, out_d);
  const auto hx = Kokkos::create_mirror_view_and_copy(HostSpace(), x);
  const auto hh = Kokkos::create_mirror_view_and_copy(HostSpace(), out_h);
  const auto hd = Kokkos::create_mirror_view_and_copy(HostSpace(), out_d);
  const ColumnGroups g = column_groups(rows);
  for (int j = 0; j < cols; ++j) {
    float total = 0, total_squares = 0;
    for (std::int64_t group = 0; group < g.groups; ++group) {
      float part = 0, part_squares = 0;
      for (std::int64_t i = group * g.group_rows; i < g.end(group, rows); ++i) {
        const float v = hx(i, j);
        part += v;
        part_squares += v * v;
      }
      total += part;
      total_squares += part_squares;
    }
    ASSERT_EQ(hh(j, 0), 0.5f + total) << "host path, column " << j;
    ASSERT_EQ(hh(j, 1), 0.5f + total_squares) << "host path, column " << j;
    ASSERT_EQ(hd(j, 0), hh(j, 0)) << "device path, column " << j;
    ASSERT_EQ(hd(j, 1), hh(j, 1)) << "device path, column " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ColumnSumsShapes,
                         ::testing::Values(std::make_pair(1, 3), std::make_pair(300, 70), std::make_pair(32900, 13)));

}  // namespace
}  // namespace kpipe
