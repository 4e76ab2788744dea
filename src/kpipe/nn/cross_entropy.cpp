#include "kpipe/nn/cross_entropy.hpp"

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/nn/strided_max.hpp"

namespace kpipe::nn {

namespace cross_entropy_detail {

// Device path: one team per row (the vocabulary can be large, 50k, while a micro-batch has few rows). Each
// thread sweeps a strided share of the row, j = lane, lane + lanes, ..., in registers of its own (coalesced
// on a GPU), then the team combines the shares: a fixed order, so the same inputs give the same bits on
// every run. Host path: one thread per row, each sweep a vectorized loop.
using Row = Kokkos::TeamPolicy<ExecSpace>::member_type;

template <class T>
void require_shapes(In2<T> logits, const View1<const Token>& targets, const char* out_name, std::int64_t out_rows,
                    std::int64_t out_cols) {
  require(logits.extent(1) > 0, "cross_entropy: logits must have at least one column, got {}", logits.extent(1));
  require(targets.extent(0) == logits.extent(0),
          "cross_entropy: targets must have {} entries (rows of logits), got {}", logits.extent(0),
          targets.extent(0));
  require(out_rows == std::int64_t(logits.extent(0)) && out_cols == std::int64_t(logits.extent(1)),
          "cross_entropy: {} must be [{}, {}], got [{}, {}]", out_name, logits.extent(0), logits.extent(1), out_rows,
          out_cols);
}

// The max of a row, for subtracting before exp.
template <class T> KOKKOS_INLINE_FUNCTION T row_max(const Row& team, const T* row, int cols) {
  const int lanes = team.team_size();
  T result = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, lanes),
      [&](int lane, T& team_max) {
        if (lane < cols) team_max = math::max(team_max, strided_max(row, lane, cols - 1, lanes));
      },
      Kokkos::Max<T>(result));
  return result;
}

// sum_j exp(row[j] - shift); given kept, the exponentials are also written to kept[j] (which may be row).
template <class T>
KOKKOS_INLINE_FUNCTION T sum_exp(const Row& team, const T* row, int cols, T shift, T* kept = nullptr) {
  const int lanes = team.team_size();
  T result = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, lanes),
      [&](int lane, T& team_sum) {
        T s = 0;
        for (int j = lane; j < cols; j += lanes) {
          const T e = math::exp(row[j] - shift);
          if (kept) kept[j] = e;
          s += e;
        }
        team_sum += s;
      },
      result);
  return result;
}

// An out-of-range target gives a NaN loss (which the trainer's finite check reports) rather than an
// out-of-bounds read.
KOKKOS_INLINE_FUNCTION bool valid_target(Token target, int cols) { return target >= 0 && target < cols; }

}  // namespace cross_entropy_detail

template <class T, KernelPath P>
void cross_entropy_forward(const ExecSpace& space, In2<T> logits, const View1<const Token>& targets,
                           const View1<T>& losses) {
  using namespace cross_entropy_detail;
  require_shapes<T>(logits, targets, "losses", losses.extent(0), logits.extent(1));
  const View2<const T> x = logits;
  const View1<const Token> y = targets;
  const int cols = x.extent(1);
  if constexpr (P == KernelPath::host) {
    // One thread per row, each sweep a vectorized loop (see core/elementwise.hpp).
    Kokkos::parallel_for("kpipe::nn::CrossEntropy::forward", range(space, x.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
      const T* KOKKOS_RESTRICT row = &x(i, 0);
      const T max = lane_max<T>(cols, [&](std::int64_t j) { return row[j]; });
      const T sum = lane_sum<T>(cols, [&](std::int64_t j) { return math::fast_exp(row[j] - max); });
      const Token target = y(i);
      losses(i) = valid_target(target, cols) ? max + math::log(sum) - row[target] : math::log(T(-1));
    });
    return;
  }
  for_each_team("kpipe::nn::CrossEntropy::forward", space, x.extent(0),
                       KOKKOS_LAMBDA(const Row& team) {
                         const int i = team.league_rank();
                         const T* const row = &x(i, 0);
                         const T max = row_max(team, row, cols);
                         const T sum = sum_exp(team, row, cols, max);
                         Kokkos::single(Kokkos::PerTeam(team), [&] {
                           const Token target = y(i);
                           const T logsumexp = max + math::log(sum);
                           losses(i) = valid_target(target, cols) ? logsumexp - x(i, target) : math::log(T(-1));
                         });
                       });
}

template <class T, class A, KernelPath P>
void cross_entropy_backward_input(const ExecSpace& space, In2<T> logits, const View1<const Token>& targets, T scale,
                                  const View2<A>& dlogits) {
  using namespace cross_entropy_detail;
  require_shapes<T>(logits, targets, "dlogits", dlogits.extent(0), dlogits.extent(1));
  const View2<const T> x = logits;
  const View1<const Token> y = targets;
  const int cols = x.extent(1);
  if constexpr (mixed_precision<T, A>) {
    // dlogits in A is not where the exponentials can wait (they would be rounded): the last sweep computes
    // each one again (the same function of the same input, so the same value) and rounds only the result.
    if constexpr (P == KernelPath::host) {
      Kokkos::parallel_for(
          "kpipe::nn::CrossEntropy::backward_input", range(space, x.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
            const T* KOKKOS_RESTRICT row = &x(i, 0);
            A* KOKKOS_RESTRICT grad = &dlogits(i, 0);
            const T max = lane_max<T>(cols, [&](std::int64_t j) { return row[j]; });
            const T inv_sum = T(1) / lane_sum<T>(cols, [&](std::int64_t j) { return math::fast_exp(row[j] - max); });
            const Token target = y(i);
            for (int j = 0; j < cols; ++j) {
              const T p = math::fast_exp(row[j] - max) * inv_sum;
              grad[j] = narrow<A>(scale * (j == target ? p - T(1) : p));
            }
          });
    } else {
      for_each_team("kpipe::nn::CrossEntropy::backward_input", space, x.extent(0), KOKKOS_LAMBDA(const Row& team) {
        const int i = team.league_rank();
        const T* const row = &x(i, 0);
        A* const grad = &dlogits(i, 0);
        const T max = row_max(team, row, cols);
        const T inv_sum = T(1) / sum_exp(team, row, cols, max);
        const Token target = y(i);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
          const T p = math::exp(row[j] - max) * inv_sum;
          grad[j] = narrow<A>(scale * (j == target ? p - T(1) : p));
        });
      });
    }
  } else {
    if constexpr (P == KernelPath::host) {
      Kokkos::parallel_for(
          "kpipe::nn::CrossEntropy::backward_input", range(space, x.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
            const T* const row = &x(i, 0);
            T* const grad = &dlogits(i, 0);  // may be row itself (in place): each element is read, then written
            const T max = lane_max<T>(cols, [&](std::int64_t j) { return row[j]; });
            const T inv_sum = T(1) / lane_sum<T>(cols, [&](std::int64_t j) {
                                const T e = math::fast_exp(row[j] - max);
                                grad[j] = e;
                                return e;
                              });
            const Token target = y(i);
            for (int j = 0; j < cols; ++j) {
              const T p = grad[j] * inv_sum;
              grad[j] = scale * (j == target ? p - T(1) : p);
            }
          });
      return;
    }
    for_each_team("kpipe::nn::CrossEntropy::backward_input", space, x.extent(0),
                         KOKKOS_LAMBDA(const Row& team) {
                           const int i = team.league_rank();
                           const T* const row = &x(i, 0);
                           T* const grad = &dlogits(i, 0);  // may be row itself (in place)
                           // The max sweep reads the whole row before the team has its result, so before any
                           // write; the exponential sweep then reads and writes each element in one thread.
                           const T max = row_max(team, row, cols);
                           const T inv_sum = T(1) / sum_exp(team, row, cols, max, grad);
                           const Token target = y(i);
                           team.team_barrier();  // the last sweep splits the row among the threads differently
                           Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
                             const T p = grad[j] * inv_sum;
                             grad[j] = scale * (j == target ? p - T(1) : p);
                           });
                         });
  }
}

#define KPIPE_INSTANTIATE_KERNEL(T, A, P)                                                                             \
  template void cross_entropy_backward_input<T, A, P>(const ExecSpace&, In2<T>, const View1<const Token>&, T,         \
                                                      const View2<A>&);
#define KPIPE_INSTANTIATE_ACCUMULATION_KERNEL(T, P)                                                                   \
  template void cross_entropy_forward<T, P>(const ExecSpace&, In2<T>, const View1<const Token>&, const View1<T>&);
KPIPE_CHECKED_KERNELS(KPIPE_INSTANTIATE_KERNEL)
KPIPE_CHECKED_ACCUMULATION_KERNELS(KPIPE_INSTANTIATE_ACCUMULATION_KERNEL)
#undef KPIPE_INSTANTIATE_KERNEL
#undef KPIPE_INSTANTIATE_ACCUMULATION_KERNEL

}  // namespace kpipe::nn
