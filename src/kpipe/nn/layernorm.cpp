#include "kpipe/nn/layernorm.hpp"

#include "kpipe/core/column_sums.hpp"
#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/nn/linear.hpp"

namespace kpipe::nn {

// The device path gives one team to one row: the team's threads split the row's columns, so loads are
// coalesced and the row stays in cache between the short passes over it. The host path gives a row to one
// thread, each pass a vectorized loop. Team reductions combine in a fixed order, so the results are
// reproducible either way.
using RowTeam = Kokkos::TeamPolicy<ExecSpace>::member_type;

// One row's normalization, the one expression forward and add_residual_forward both evaluate, so that they
// give the same bits.
namespace layernorm_detail {

// Host path: row xr -> yr, its mean and reciprocal deviation; three vectorized sweeps.
template <class T, class A>
KOKKOS_INLINE_FUNCTION void normalize_row(const A* KOKKOS_RESTRICT xr, A* KOKKOS_RESTRICT yr,
                                          const T* KOKKOS_RESTRICT g, const T* KOKKOS_RESTRICT b, int cols,
                                          T inv_cols, T eps, T& mean, T& rstd) {
  const T shift = widen<T>(xr[0]);
  const T mu = shift + lane_sum<T>(cols, [&](std::int64_t j) { return widen<T>(xr[j]) - shift; }) * inv_cols;
  const T squares = lane_sum<T>(cols, [&](std::int64_t j) {
    const T d = widen<T>(xr[j]) - mu;
    return d * d;
  });
  const T r = T(1) / math::sqrt(squares * inv_cols + eps);
  for (int j = 0; j < cols; ++j) yr[j] = narrow<A>((widen<T>(xr[j]) - mu) * r * g[j] + b[j]);
  mean = mu;
  rstd = r;
}

// Device path: row i of x -> y, mean(i), rstd(i), by the team.
template <class T, class A>
KOKKOS_INLINE_FUNCTION void normalize_row(const RowTeam& team, std::int64_t i, const View2<const A>& x,
                                          const View2<A>& y, const View1<T>& gamma, const View1<T>& beta, int cols,
                                          T inv_cols, T eps, const View1<T>& mean, const View1<T>& rstd) {
  // Float keeps 24 bits: summing raw values of size |mean| >> std would lose the small deviations, so the sum
  // runs over x - x(i, 0), and the variance is taken about the mean in a second pass over the cached row (not
  // E[x^2] - E[x]^2, which cancels catastrophically).
  const T shift = widen<T>(x(i, 0));
  T shifted_sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, cols), [&](int j, T& s) { s += widen<T>(x(i, j)) - shift; }, shifted_sum);
  const T mu = shift + shifted_sum * inv_cols;
  T squares = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, cols),
      [&](int j, T& s) {
        const T d = widen<T>(x(i, j)) - mu;
        s += d * d;
      },
      squares);
  const T r = T(1) / math::sqrt(squares * inv_cols + eps);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols),
                       [&](int j) { y(i, j) = narrow<A>((widen<T>(x(i, j)) - mu) * r * gamma(j) + beta(j)); });
  Kokkos::single(Kokkos::PerTeam(team), [&] {
    mean(i) = mu;
    rstd(i) = r;
  });
}

}  // namespace layernorm_detail

// x[N, C] -> y[N, C], mean[N], rstd[N]
template <class T, class A, KernelPath P>
void forward(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<A> x, const View2<A>& y, const View1<T>& mean,
             const View1<T>& rstd) {
  using layernorm_detail::normalize_row;
  const auto gamma = ln.gamma;
  const auto beta = ln.beta;
  const T eps = ln.eps;
  const int cols = int(x.extent(1));
  const T inv_cols = T(1) / T(cols);
  const View2<const A> in = x;
  if constexpr (P == KernelPath::host) {
    Kokkos::parallel_for("kpipe::nn::LayerNorm::forward", range(space, x.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
      normalize_row<T, A>(&in(i, 0), &y(i, 0), gamma.data(), beta.data(), cols, inv_cols, eps, mean(i), rstd(i));
    });
    return;
  }
  for_each_team(
      "kpipe::nn::LayerNorm::forward", space, x.extent(0), KOKKOS_LAMBDA(const RowTeam& team) {
        normalize_row<T, A>(team, team.league_rank(), in, y, gamma, beta, cols, inv_cols, eps, mean, rstd);
      });
}

// sum[N, C] = product + bias + residual (rounded once, as Linear's mixed epilogue rounds it), then
// y = LayerNorm(sum) from the rounded sum, as forward computes it: both with forward_residual's and forward's
// bits, in one pass over each row instead of two kernels.
template <class T, class A, KernelPath P>
void add_residual_forward(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<T> product, In1<T> bias,
                          In2<A> residual, const View2<A>& sum, const View2<A>& y, const View1<T>& mean,
                          const View1<T>& rstd) {
  using layernorm_detail::normalize_row;
  const auto gamma = ln.gamma;
  const auto beta = ln.beta;
  const T eps = ln.eps;
  const int cols = int(sum.extent(1));
  const T inv_cols = T(1) / T(cols);
  const View2<const T> p = product;
  const View1<const T> b = bias;
  const View2<const A> r = residual;
  const View2<const A> added = sum;
  const bool has_bias = b.extent(0) > 0;
  if constexpr (P == KernelPath::host) {
    Kokkos::parallel_for(
        "kpipe::nn::LayerNorm::add_residual_forward", range(space, sum.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
          A* KOKKOS_RESTRICT out = &sum(i, 0);
          const T* KOKKOS_RESTRICT pr = &p(i, 0);
          const T* KOKKOS_RESTRICT br = has_bias ? b.data() : nullptr;
          const A* KOKKOS_RESTRICT rr = &r(i, 0);
          for (int j = 0; j < cols; ++j) out[j] = epilogue<A>(pr[j], has_bias ? br[j] : T(0), widen<T>(rr[j]));
          normalize_row<T, A>(out, &y(i, 0), gamma.data(), beta.data(), cols, inv_cols, eps, mean(i), rstd(i));
        });
    return;
  }
  for_each_team(
      "kpipe::nn::LayerNorm::add_residual_forward", space, sum.extent(0), KOKKOS_LAMBDA(const RowTeam& team) {
        const auto i = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
          sum(i, j) = epilogue<A>(p(i, j), has_bias ? b(j) : T(0), widen<T>(r(i, j)));
        });
        team.team_barrier();  // the normalization reads the row the team wrote, across its threads
        normalize_row<T, A>(team, i, added, y, gamma, beta, cols, inv_cols, eps, mean, rstd);
      });
}

// dy[N, C] -> dx[N, C] = residual + rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma.
template <class T, class A, KernelPath P>
void backward_input(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<A> x, In1<T> mean, In1<T> rstd, In2<A> dy,
                    const View2<A>& dx, In2<A> residual) {
  const auto gamma = ln.gamma;
  const int cols = int(x.extent(1));
  const T inv_cols = T(1) / T(cols);
  const View2<const A> plus = residual;
  const bool has_residual = plus.extent(0) > 0;
  if constexpr (P == KernelPath::host) {
    // In place (residual is dx) reads dx through dx's own pointer: a second pointer to it would break restrict.
    const bool in_place = plus.data() == dx.data();
    Kokkos::parallel_for(
        "kpipe::nn::LayerNorm::backward_input", range(space, x.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
          const A* KOKKOS_RESTRICT xr = &x(i, 0);
          const A* KOKKOS_RESTRICT dyr = &dy(i, 0);
          const T* KOKKOS_RESTRICT g = gamma.data();
          A* KOKKOS_RESTRICT dxr = &dx(i, 0);
          const A* KOKKOS_RESTRICT pr = has_residual && !in_place ? &plus(i, 0) : nullptr;
          const T mu = mean(i), r = rstd(i);
          const T mean_g = lane_sum<T>(cols, [&](std::int64_t j) { return widen<T>(dyr[j]) * g[j]; }) * inv_cols;
          const T mean_g_xhat = lane_sum<T>(cols, [&](std::int64_t j) {
                                  return widen<T>(dyr[j]) * g[j] * (widen<T>(xr[j]) - mu) * r;
                                }) * inv_cols;
          const auto d = [&](int j) {
            return r * (widen<T>(dyr[j]) * g[j] - mean_g - (widen<T>(xr[j]) - mu) * r * mean_g_xhat);
          };
          // Three loops, not beta * dx + d (0 * NaN is NaN); each value rounded once, after the add.
          if (in_place) {
            for (int j = 0; j < cols; ++j) dxr[j] = narrow<A>(widen<T>(dxr[j]) + d(j));
          } else if (pr) {
            for (int j = 0; j < cols; ++j) dxr[j] = narrow<A>(widen<T>(pr[j]) + d(j));
          } else {
            for (int j = 0; j < cols; ++j) dxr[j] = narrow<A>(d(j));
          }
        });
    return;
  }
  for_each_team(
      "kpipe::nn::LayerNorm::backward_input", space, x.extent(0), KOKKOS_LAMBDA(const RowTeam& team) {
        const auto i = team.league_rank();
        const T mu = mean(i);
        const T r = rstd(i);
        T sum_g = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols), [&](int j, T& s) { s += widen<T>(dy(i, j)) * gamma(j); }, sum_g);
        T sum_g_xhat = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols),
            [&](int j, T& s) { s += widen<T>(dy(i, j)) * gamma(j) * (widen<T>(x(i, j)) - mu) * r; }, sum_g_xhat);
        const T mean_g = sum_g * inv_cols;
        const T mean_g_xhat = sum_g_xhat * inv_cols;
        // Each thread reads residual(i, j) before it writes dx(i, j): in place is safe.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
          const T xhat = (widen<T>(x(i, j)) - mu) * r;
          const T d = r * (widen<T>(dy(i, j)) * gamma(j) - mean_g - xhat * mean_g_xhat);
          // A branch, not beta * residual + d: 0 * NaN from an uninitialized dx would still be NaN.
          if (has_residual) {
            dx(i, j) = narrow<A>(widen<T>(plus(i, j)) + d);
          } else {
            dx(i, j) = narrow<A>(d);
          }
        });
      });
}

// dgamma[C] += sum_rows dy xhat, dbeta[C] += sum_rows dy
template <class T, class A, KernelPath P>
void backward_weight(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<A> x, In1<T> mean, In1<T> rstd,
                     In2<A> dy) {
  const auto dgamma = ln.dgamma;
  const auto dbeta = ln.dbeta;
  // Two-level column sums in T, in a fixed order (reproducible without atomics); see core/column_sums.hpp.
  column_sums<T, 2, P>(
      "kpipe::nn::LayerNorm::backward_weight", space, x.extent(0), x.extent(1),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
        const T g = widen<T>(dy(i, j));
        return ColumnTerms<T, 2>{{g * (widen<T>(x(i, j)) - mean(i)) * rstd(i), g}};
      },
      KOKKOS_LAMBDA(std::int64_t j, const ColumnTerms<T, 2>& s) {
        dgamma(j) += s[0];
        dbeta(j) += s[1];
      });
}

#define KPIPE_INSTANTIATE_KERNEL(T, A, P)                                                                             \
  template void forward<T, A, P>(const ExecSpace&, const LayerNorm<T, A>&, In2<A>, const View2<A>&,                   \
                                 const View1<T>&, const View1<T>&);                                                   \
  template void add_residual_forward<T, A, P>(const ExecSpace&, const LayerNorm<T, A>&, In2<T>, In1<T>, In2<A>,       \
                                              const View2<A>&, const View2<A>&, const View1<T>&, const View1<T>&);    \
  template void backward_input<T, A, P>(const ExecSpace&, const LayerNorm<T, A>&, In2<A>, In1<T>, In1<T>, In2<A>,     \
                                        const View2<A>&, In2<A>);                                                     \
  template void backward_weight<T, A, P>(const ExecSpace&, const LayerNorm<T, A>&, In2<A>, In1<T>, In1<T>, In2<A>);
KPIPE_CHECKED_KERNELS(KPIPE_INSTANTIATE_KERNEL)
#undef KPIPE_INSTANTIATE_KERNEL

}  // namespace kpipe::nn
