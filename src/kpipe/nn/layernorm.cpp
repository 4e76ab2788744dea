#include "kpipe/nn/layernorm.hpp"

#include "kpipe/core/column_sums.hpp"
#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::nn {

// The device path gives one team to one row: the team's threads split the row's columns, so loads are
// coalesced and the row stays in cache between the short passes over it. The host path gives a row to one
// thread, each pass a vectorized loop. Team reductions combine in a fixed order, so the results are
// reproducible either way.
using RowTeam = Kokkos::TeamPolicy<ExecSpace>::member_type;

// x[N, C] -> y[N, C], mean[N], rstd[N]
template <class T, class A, KernelPath P>
void forward(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<A> x, const View2<A>& y, const View1<T>& mean,
             const View1<T>& rstd) {
  const auto gamma = ln.gamma;
  const auto beta = ln.beta;
  const T eps = ln.eps;
  const int cols = int(x.extent(1));
  const T inv_cols = T(1) / T(cols);
  if constexpr (P == KernelPath::host) {
    // One thread per row; the same three sweeps as below, each a vectorized loop over raw pointers.
    Kokkos::parallel_for("kpipe::nn::LayerNorm::forward", range(space, x.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
      const A* KOKKOS_RESTRICT xr = &x(i, 0);
      const T* KOKKOS_RESTRICT g = gamma.data();
      const T* KOKKOS_RESTRICT b = beta.data();
      A* KOKKOS_RESTRICT yr = &y(i, 0);
      const T shift = widen<T>(xr[0]);
      const T mu = shift + lane_sum<T>(cols, [&](std::int64_t j) { return widen<T>(xr[j]) - shift; }) * inv_cols;
      const T squares = lane_sum<T>(cols, [&](std::int64_t j) {
        const T d = widen<T>(xr[j]) - mu;
        return d * d;
      });
      const T r = T(1) / math::sqrt(squares * inv_cols + eps);
      for (int j = 0; j < cols; ++j) yr[j] = narrow<A>((widen<T>(xr[j]) - mu) * r * g[j] + b[j]);
      mean(i) = mu;
      rstd(i) = r;
    });
    return;
  }
  for_each_team(
      "kpipe::nn::LayerNorm::forward", space, x.extent(0), KOKKOS_LAMBDA(const RowTeam& team) {
        const auto i = team.league_rank();
        // Float keeps 24 bits: summing raw values of size |mean| >> std would lose the small deviations, so
        // the sum runs over x - x(i, 0), and the variance is taken about the mean in a second pass over the
        // cached row (not E[x^2] - E[x]^2, which cancels catastrophically).
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
  template void backward_input<T, A, P>(const ExecSpace&, const LayerNorm<T, A>&, In2<A>, In1<T>, In1<T>, In2<A>,     \
                                        const View2<A>&, In2<A>);                                                     \
  template void backward_weight<T, A, P>(const ExecSpace&, const LayerNorm<T, A>&, In2<A>, In1<T>, In1<T>, In2<A>);
KPIPE_CHECKED_KERNELS(KPIPE_INSTANTIATE_KERNEL)
#undef KPIPE_INSTANTIATE_KERNEL

}  // namespace kpipe::nn
