#include "kpipe/nn/gelu.hpp"

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::nn {

// The tanh form's constants: y = x/2 (1 + tanh(u)), u = k (x + a x^3), k = sqrt(2/pi), a = 0.044715.
// It is evaluated through the identity (1 + tanh(u)) / 2 = s = 1 / (1 + exp(-2u)): the same function, but a
// CPU's exp is several times cheaper than its tanh, and s saturates cleanly to 0 or 1 at either end.
constexpr double gelu_k = 0.7978845608028654;
constexpr double gelu_a = 0.044715;

template <class T> KOKKOS_INLINE_FUNCTION T gelu(T v) {
  const T k = gelu_k, a = gelu_a;
  const T u = k * (v + a * v * v * v);
  return v / (T(1) + math::fast_exp(T(-2) * u));
}

// x[N, F] -> y[N, F]
template <class A, KernelPath P> void gelu_forward(const ExecSpace& space, In2<A> x, const View2<A>& y) {
  using T = accumulation_t<A>;
  const View1<const A> xf(x.data(), x.span());  // whole LayoutRight allocations: flat is the same data
  const View1<A> yf(y.data(), y.span());
  for_each_block<P>("kpipe::nn::gelu_forward", space, std::int64_t(xf.extent(0)),
                 KOKKOS_LAMBDA(std::int64_t begin, std::int64_t end) {
                   const A* KOKKOS_RESTRICT xp = xf.data();
                   A* KOKKOS_RESTRICT yp = yf.data();
                   for (std::int64_t i = begin; i < end; ++i) yp[i] = narrow<A>(gelu(widen<T>(xp[i])));
                 });
}

template <class T, KernelPath P>
void bias_gelu_forward(const ExecSpace& space, In1<T> bias, const View2<T>& f, const View2<T>& g) {
  const View1<const T> b = bias;
  for_each_row_span<P>("kpipe::nn::bias_gelu_forward", space, f.extent(0), f.extent(1),
                    KOKKOS_LAMBDA(std::int64_t i, std::int64_t j0, std::int64_t j1) {
                      const T* KOKKOS_RESTRICT bp = b.data();
                      T* KOKKOS_RESTRICT fp = &f(i, 0);
                      T* KOKKOS_RESTRICT gp = &g(i, 0);
                      for (std::int64_t j = j0; j < j1; ++j) {
                        const T v = fp[j] + bp[j];
                        fp[j] = v;
                        gp[j] = gelu(v);
                      }
                    });
}

template <class T, class A, KernelPath P>
void bias_gelu_forward(const ExecSpace& space, In1<T> bias, In2<T> product, const View2<A>& f, const View2<A>& g) {
  const View1<const T> b = bias;
  const View2<const T> p = product;
  for_each_row_span<P>("kpipe::nn::bias_gelu_forward", space, f.extent(0), f.extent(1),
                       KOKKOS_LAMBDA(std::int64_t i, std::int64_t j0, std::int64_t j1) {
                         const T* KOKKOS_RESTRICT bp = b.data();
                         const T* KOKKOS_RESTRICT pp = &p(i, 0);
                         A* KOKKOS_RESTRICT fp = &f(i, 0);
                         A* KOKKOS_RESTRICT gp = &g(i, 0);
                         for (std::int64_t j = j0; j < j1; ++j) {
                           const T v = pp[j] + bp[j];
                           fp[j] = narrow<A>(v);
                           gp[j] = narrow<A>(gelu(v));
                         }
                       });
}

// (x[N, F], dy[N, F]) -> dx[N, F]: the exact derivative of the tanh form,
// dy/dx = (1 + t)/2 + x/2 (1 - t^2) u' = s + 2 x s (1 - s) u',  u' = k (1 + 3 a x^2).
template <class A, KernelPath P>
void gelu_backward_input(const ExecSpace& space, In2<A> x, In2<A> dy, const View2<A>& dx) {
  using T = accumulation_t<A>;
  const T k = gelu_k, a = gelu_a;
  const View1<const A> xf(x.data(), x.span()), dyf(dy.data(), dy.span());
  const View1<A> dxf(dx.data(), dx.span());
  for_each_block<P>("kpipe::nn::gelu_backward_input", space, std::int64_t(xf.extent(0)),
                 KOKKOS_LAMBDA(std::int64_t begin, std::int64_t end) {
                   const A* KOKKOS_RESTRICT xp = xf.data();
                   const A* dyp = dyf.data();  // may be dx itself (in place): no restrict on this pair
                   A* dxp = dxf.data();
                   for (std::int64_t i = begin; i < end; ++i) {
                     const T v = widen<T>(xp[i]);
                     const T v2 = v * v;
                     const T e = math::fast_exp(T(-2) * k * (v + a * v2 * v));
                     const T s = T(1) / (T(1) + e);
                     // s (1 - s) = e / (1 + e)^2 = 1 / (2 + e + 1/e): no cancellation when s is near 1
                     // (as 1 - s would have), no inf * 0 when e overflows, and no branch.
                     const T s_one_minus_s = T(1) / (T(2) + e + T(1) / e);
                     const T du = k * (T(1) + T(3) * a * v2);
                     dxp[i] = narrow<A>(widen<T>(dyp[i]) * (s + T(2) * v * s_one_minus_s * du));
                   }
                 });
}

// The activation over A alone (T unused), the fused bias over T alone, and its mixed form where A is not T.
#define KPIPE_INSTANTIATE_KERNEL(T, A, P)                                                                             \
  template void gelu_forward<A, P>(const ExecSpace&, In2<A>, const View2<A>&);                                        \
  template void gelu_backward_input<A, P>(const ExecSpace&, In2<A>, In2<A>, const View2<A>&);
#define KPIPE_INSTANTIATE_ACCUMULATION_KERNEL(T, P)                                                                   \
  template void bias_gelu_forward<T, P>(const ExecSpace&, In1<T>, const View2<T>&, const View2<T>&);
#define KPIPE_INSTANTIATE_MIXED_KERNEL(T, A, P)                                                                       \
  template void bias_gelu_forward<T, A, P>(const ExecSpace&, In1<T>, In2<T>, const View2<A>&, const View2<A>&);
KPIPE_CHECKED_KERNELS(KPIPE_INSTANTIATE_KERNEL)
KPIPE_CHECKED_ACCUMULATION_KERNELS(KPIPE_INSTANTIATE_ACCUMULATION_KERNEL)
KPIPE_MIXED_KERNELS(KPIPE_INSTANTIATE_MIXED_KERNEL)
#undef KPIPE_INSTANTIATE_KERNEL
#undef KPIPE_INSTANTIATE_ACCUMULATION_KERNEL
#undef KPIPE_INSTANTIATE_MIXED_KERNEL

}  // namespace kpipe::nn
