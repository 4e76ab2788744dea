#include "kpipe/nn/linear.hpp"

#include "kpipe/core/blas.hpp"
#include "kpipe/core/column_sums.hpp"
#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::nn {

// y = residual + x W^T + b.
//  - A is T: the bias (and residual) are written first, then gemm adds the product on top with beta = 1,
//    which saves a pass over y.
//  - mixed: the product goes to the T accumulator, and one epilogue adds bias and residual in T and rounds
//    the sum to A (once: writing bias and residual into y first would round them, then the sum).
template <class T, class A, KernelPath P>
void linear_into(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, const View2<const A>& residual,
                 const View2<A>& y) {
  const auto bias = layer.bias;
  const bool has_bias = bias.extent(0) > 0, has_residual = residual.extent(0) > 0;
  const auto& products = layer.products;
  if constexpr (mixed_precision<T, A>) {
    const View2<T> product = accumulator(products, y.extent(0), y.extent(1));
    blas::gemm(space, "N", "T", 1.0f, x, layer.weight, 0.0f, product, products.math, products.workspace);
    for_each_row_span<P>("kpipe::nn::Linear::forward::epilogue", space, y.extent(0), y.extent(1),
                         KOKKOS_LAMBDA(std::int64_t i, std::int64_t j0, std::int64_t j1) {
                           A* KOKKOS_RESTRICT out = &y(i, 0);
                           const T* KOKKOS_RESTRICT p = &product(i, 0);
                           const T* KOKKOS_RESTRICT b = has_bias ? bias.data() : nullptr;
                           const A* KOKKOS_RESTRICT r = has_residual ? &residual(i, 0) : nullptr;
                           for (std::int64_t j = j0; j < j1; ++j)
                             out[j] = epilogue<A>(p[j], has_bias ? b[j] : T(0),
                                                  has_residual ? widen<T>(r[j]) : T(0));
                         });
  } else {
    if (has_bias || has_residual) {
      for_each_row_span<P>("kpipe::nn::Linear::forward::bias", space, y.extent(0), y.extent(1),
                           KOKKOS_LAMBDA(std::int64_t i, std::int64_t j0, std::int64_t j1) {
                             T* KOKKOS_RESTRICT out = &y(i, 0);
                             const T* KOKKOS_RESTRICT b = has_bias ? bias.data() : nullptr;
                             const T* KOKKOS_RESTRICT r = has_residual ? &residual(i, 0) : nullptr;
                             for (std::int64_t j = j0; j < j1; ++j)
                               out[j] = (has_bias ? b[j] : T(0)) + (has_residual ? r[j] : T(0));
                           });
    }
    blas::gemm(space, "N", "T", T(1), x, layer.weight, (has_bias || has_residual) ? T(1) : T(0), y, products.math);
  }
}

template <class T, class A, KernelPath P>
void forward(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, const View2<A>& y) {
  linear_into<T, A, P>(space, layer, x, View2<const A>(), y);
}

template <class T, class A>
void forward_product(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, const View2<T>& y) {
  blas::gemm(space, "N", "T", T(1), x, layer.weight, T(0), y, layer.products.math, layer.products.workspace);
}

template <class T, class A, KernelPath P>
void forward_residual(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, In2<A> residual,
                      const View2<A>& y) {
  linear_into<T, A, P>(space, layer, x, residual, y);
}

// Mixed: dx = dy W accumulates in T and is rounded to A once (after dx, widened, is added when accumulating).
template <class T, class A>
void backward_input(const ExecSpace& space, const Linear<T, A>& layer, In2<A> dy, const View2<A>& dx,
                    bool accumulate) {
  using S = blas::scalar_t<A>;
  blas::gemm(space, "N", "N", S(1), dy, layer.weight, accumulate ? S(1) : S(0), dx, layer.products.math,
             layer.products.workspace);
}

template <class T, class A, KernelPath P>
void backward_weight(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, In2<A> dy) {
  // dweight (T) += dy^T x: A operands, T accumulation, across micro-batches too (beta = 1).
  blas::gemm(space, "T", "N", T(1), dy, x, T(1), layer.dweight, layer.products.math, layer.products.workspace);
  const auto dbias = layer.dbias;
  if (dbias.extent(0) == 0) return;
  const View2<const A> g = dy;
  // Two-level column sums in T, in a fixed order (reproducible without atomics); see core/column_sums.hpp.
  column_sums<T, 1, P>(
      "kpipe::nn::Linear::backward_weight::bias", space, dy.extent(0), dbias.extent(0),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) { return ColumnTerms<T, 1>{{widen<T>(g(i, j))}}; },
      KOKKOS_LAMBDA(std::int64_t j, const ColumnTerms<T, 1>& s) { dbias(j) += s[0]; });
}

#define KPIPE_INSTANTIATE_KERNEL(T, A, P)                                                                             \
  template void forward<T, A, P>(const ExecSpace&, const Linear<T, A>&, In2<A>, const View2<A>&);                     \
  template void forward_residual<T, A, P>(const ExecSpace&, const Linear<T, A>&, In2<A>, In2<A>, const View2<A>&);    \
  template void backward_weight<T, A, P>(const ExecSpace&, const Linear<T, A>&, In2<A>, In2<A>);
#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template void forward_product(const ExecSpace&, const Linear<T, A>&, In2<A>, const View2<T>&);                      \
  template void backward_input(const ExecSpace&, const Linear<T, A>&, In2<A>, const View2<A>&, bool);
KPIPE_CHECKED_KERNELS(KPIPE_INSTANTIATE_KERNEL)
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE_KERNEL
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::nn
