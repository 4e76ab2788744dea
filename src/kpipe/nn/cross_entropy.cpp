#include "kpipe/nn/cross_entropy.hpp"

#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"

namespace kpipe::nn {

namespace cross_entropy_detail {

// One team per row: the vocabulary can be large (50k) while a micro-batch has few rows, so the sweeps over
// a row are split among the team's threads. Team reductions combine in a fixed order, so the result is
// the same on every run.
using RowPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Row = RowPolicy::member_type;

template <class T> void require_shapes(In2<T> logits, const View1<const Token>& targets, const char* out_name,
                                       std::int64_t out_rows, std::int64_t out_cols) {
  require(logits.extent(1) > 0, "cross_entropy: logits must have at least one column, got {}", logits.extent(1));
  require(targets.extent(0) == logits.extent(0), "cross_entropy: targets must have {} entries (rows of logits), got {}",
          logits.extent(0), targets.extent(0));
  require(out_rows == std::int64_t(logits.extent(0)) && out_cols == std::int64_t(logits.extent(1)),
          "cross_entropy: {} must be [{}, {}], got [{}, {}]", out_name, logits.extent(0), logits.extent(1), out_rows,
          out_cols);
}

// max_j logits(i, j) and sum_j exp(logits(i, j) - max), reduced over the team of row i.
template <class T> struct RowStats {
  T max, sum;
};
template <class T> KOKKOS_INLINE_FUNCTION RowStats<T> row_stats(const Row& team, const View2<const T>& logits, std::int64_t i) {
  const std::int64_t cols = logits.extent(1);
  T row_max = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, cols),
      [&](std::int64_t j, T& m) { m = math::max(m, logits(i, j)); }, Kokkos::Max<T>(row_max));
  T sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, cols), [&](std::int64_t j, T& s) { s += math::exp(logits(i, j) - row_max); },
      sum);
  return {row_max, sum};
}

// An out-of-range target gives a NaN loss (which the trainer's finite check reports) rather than an
// out-of-bounds read.
KOKKOS_INLINE_FUNCTION bool valid_target(Token target, std::int64_t cols) { return target >= 0 && target < cols; }

}  // namespace cross_entropy_detail

template <class T>
void cross_entropy_forward(const ExecSpace& space, In2<T> logits, const View1<const Token>& targets,
                           const View1<T>& losses) {
  using namespace cross_entropy_detail;
  require_shapes<T>(logits, targets, "losses", losses.extent(0), logits.extent(1));
  const View2<const T> x = logits;
  const View1<const Token> y = targets;
  const std::int64_t cols = x.extent(1);
  Kokkos::parallel_for("kpipe::nn::CrossEntropy::forward", RowPolicy(space, x.extent(0), Kokkos::AUTO),
                       KOKKOS_LAMBDA(const Row& team) {
                         const std::int64_t i = team.league_rank();
                         const RowStats<T> stats = row_stats(team, x, i);
                         Kokkos::single(Kokkos::PerTeam(team), [&] {
                           const Token target = y(i);
                           const T lse = stats.max + math::log(stats.sum);
                           losses(i) = valid_target(target, cols) ? lse - x(i, target) : math::log(T(-1));
                         });
                       });
}

template <class T>
void cross_entropy_backward_input(const ExecSpace& space, In2<T> logits, const View1<const Token>& targets, T scale,
                                  const View2<T>& dlogits) {
  using namespace cross_entropy_detail;
  require_shapes<T>(logits, targets, "dlogits", dlogits.extent(0), dlogits.extent(1));
  const View2<const T> x = logits;
  const View1<const Token> y = targets;
  Kokkos::parallel_for("kpipe::nn::CrossEntropy::backward_input", RowPolicy(space, x.extent(0), Kokkos::AUTO),
                       KOKKOS_LAMBDA(const Row& team) {
                         const std::int64_t i = team.league_rank();
                         const RowStats<T> stats = row_stats(team, x, i);
                         const T inv_sum = T(1) / stats.sum;
                         const Token target = y(i);
                         // Each element is read before it is written, by the same thread: in place is safe.
                         // The barrier keeps every thread's reads of row i (the reductions) before any write.
                         team.team_barrier();
                         Kokkos::parallel_for(Kokkos::TeamThreadRange(team, x.extent(1)), [&](std::int64_t j) {
                           const T p = math::exp(x(i, j) - stats.max) * inv_sum;
                           dlogits(i, j) = scale * (j == target ? p - T(1) : p);
                         });
                       });
}

template void cross_entropy_forward(const ExecSpace&, In2<float>, const View1<const Token>&, const View1<float>&);
template void cross_entropy_backward_input(const ExecSpace&, In2<float>, const View1<const Token>&, float,
                                           const View2<float>&);
template void cross_entropy_forward(const ExecSpace&, In2<double>, const View1<const Token>&, const View1<double>&);
template void cross_entropy_backward_input(const ExecSpace&, In2<double>, const View1<const Token>&, double,
                                           const View2<double>&);

}  // namespace kpipe::nn
