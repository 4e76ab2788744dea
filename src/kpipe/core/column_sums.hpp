#pragma once
// Column sums in two levels, deterministic: the rows of a rows x cols sum are cut into groups of
// ColumnGroups::group_rows (the last one shorter); each group's partial sums its rows in order, then the
// partials are summed in group order. The grouping depends on the row count alone, so every path, backend and
// pipeline layout adds the same terms in the same order and gets the same bits, with no atomics.
//
// Why two levels: one thread per column walking every row (the one-level sum) gives a GPU a few thousand
// threads, each waiting on one load after another (8192 rows of the wide model: rows x one memory latency).
// Here the device path runs one team per tile of column_tile neighbouring columns: its threads take the row
// groups, each thread's vector lanes the tile's columns (neighbouring loads, one 32-byte sector of floats),
// the partials go to the team's scratch, and after a barrier one lane per column sums them. That is
// groups x cols work items (65,536 for 8192 rows and 1024 columns), each walking group_rows rows. The host path
// gives a work item a block of column_block neighbouring columns and walks each group's rows with the block's
// partial sums in registers, a vectorized inner loop.
#include <algorithm>

#include "kpipe/core/elementwise.hpp"

namespace kpipe {

struct ColumnGroups {
  std::int64_t group_rows = 0, groups = 0;
  // Group g's rows are [g * group_rows, end(g, rows)): the last group may be shorter.
  KOKKOS_INLINE_FUNCTION std::int64_t end(std::int64_t g, std::int64_t rows) const {
    return (g + 1) * group_rows < rows ? (g + 1) * group_rows : rows;
  }
};

// Rows per group: at least column_group_min_rows (a walk long enough to hide a load's latency behind the
// others in flight), more when rows would need more than column_group_max groups (the team's scratch holds
// one partial per group).
inline constexpr std::int64_t column_group_min_rows = 128;
inline constexpr std::int64_t column_group_max = 256;

constexpr ColumnGroups column_groups(std::int64_t rows) {
  if (rows <= 0) return {column_group_min_rows, 0};
  const std::int64_t spread = (rows + column_group_max - 1) / column_group_max;
  const std::int64_t group_rows = std::max(column_group_min_rows, spread);
  return {group_rows, (rows + group_rows - 1) / group_rows};
}

// The device path's columns per team (its vector lanes); the host path's per work item are column_block's.
inline constexpr int column_tile = 8;

// The device path's threads per team on a GPU: one per row group, up to a 1024-thread block of column_tile lanes
// each (threads beyond that take several groups in turn).
constexpr int column_sum_threads(std::int64_t groups) {
  return int(std::min<std::int64_t>(std::max<std::int64_t>(groups, 1), 1024 / column_tile));
}

// K running sums per column (LayerNorm's gamma and beta gradients share one pass over dy).
template <class T, int K> using ColumnTerms = Kokkos::Array<T, K>;

// For each column j of [0, cols): finish(j, S) with S[k] = sum over rows i of term(i, j)[k], in the order above.
// term(i, j) returns ColumnTerms<T, K>; both are called in kernels (KOKKOS_LAMBDA).
template <class T, int K, KernelPath P = default_kernel_path, class Term, class Finish>
void column_sums(const char* label, const ExecSpace& space, std::int64_t rows, std::int64_t cols, const Term& term,
                 const Finish& finish) {
  if (cols <= 0) return;
  const ColumnGroups grouping = column_groups(rows);
  const std::int64_t groups = grouping.groups;
  if constexpr (P == KernelPath::host) {
    constexpr int width = column_block<KernelPath::host>;
    Kokkos::parallel_for(label, range(space, (cols + width - 1) / width), KOKKOS_LAMBDA(std::int64_t block) {
      const std::int64_t c0 = block * width;
      const int n = cols - c0 < width ? int(cols - c0) : width;
      T total[K][width], part[K][width];
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < width; ++j) total[k][j] = T(0);
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::int64_t i0 = g * grouping.group_rows, i1 = grouping.end(g, rows);
        for (int k = 0; k < K; ++k)
          for (int j = 0; j < width; ++j) part[k][j] = T(0);
        for (std::int64_t i = i0; i < i1; ++i)
          for (int j = 0; j < n; ++j) {
            const ColumnTerms<T, K> t = term(i, c0 + j);
            for (int k = 0; k < K; ++k) part[k][j] += t[k];
          }
        for (int k = 0; k < K; ++k)
          for (int j = 0; j < n; ++j) total[k][j] += part[k][j];
      }
      for (int j = 0; j < n; ++j) {
        ColumnTerms<T, K> s;
        for (int k = 0; k < K; ++k) s[k] = total[k][j];
        finish(c0 + j, s);
      }
    });
  } else {
    using Policy = Kokkos::TeamPolicy<ExecSpace>;
    using Member = Policy::member_type;
    using Partials = Kokkos::View<T***, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
    // A copy in the kernel: the ranges take their bounds by reference, and CUDA cannot odr-use a host constexpr.
    const int tile = column_tile;
    const std::int64_t league = (cols + tile - 1) / tile;
    const auto kernel = KOKKOS_LAMBDA(const Member& team) {
      const std::int64_t c0 = std::int64_t(team.league_rank()) * tile;
      const Partials partial(team.team_scratch(0), groups, K, tile);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](std::int64_t g) {
        const std::int64_t i0 = g * grouping.group_rows, i1 = grouping.end(g, rows);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, tile), [&](int l) {
          const std::int64_t j = c0 + l;
          T acc[K];
          for (int k = 0; k < K; ++k) acc[k] = T(0);
          if (j < cols)
            for (std::int64_t i = i0; i < i1; ++i) {
              const ColumnTerms<T, K> t = term(i, j);
              for (int k = 0; k < K; ++k) acc[k] += t[k];
            }
          for (int k = 0; k < K; ++k) partial(g, k, l) = acc[k];
        });
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, tile), [&](int l) {
        const std::int64_t j = c0 + l;
        if (j >= cols) return;
        ColumnTerms<T, K> s;
        for (int k = 0; k < K; ++k) s[k] = T(0);
        for (std::int64_t g = 0; g < groups; ++g)
          for (int k = 0; k < K; ++k) s[k] += partial(g, k, l);
        finish(j, s);
      });
    };
    const auto scratch = Kokkos::PerTeam(Partials::shmem_size(groups, K, tile));
    if constexpr (host_memory) {
      // Every thread the backend lends one team, as for_each_team: the barrier and the split run for real.
      Policy probe(space, league, 1);
      probe.set_scratch_size(0, scratch);
      const int size = probe.team_size_max(kernel, Kokkos::ParallelForTag());
      Kokkos::parallel_for(label, Policy(space, league, size).set_scratch_size(0, scratch), kernel);
    } else {
      Kokkos::parallel_for(
          label, Policy(space, league, column_sum_threads(groups), tile).set_scratch_size(0, scratch), kernel);
    }
  }
}

}  // namespace kpipe
