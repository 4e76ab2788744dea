#include "kpipe/nn/gelu.hpp"

#include "kpipe/core/math.hpp"

namespace kpipe::nn {

// The tanh form's constants: y = x/2 (1 + tanh(u)), u = k (x + a x^3), k = sqrt(2/pi), a = 0.044715.
// It is evaluated through the identity (1 + tanh(u)) / 2 = s = 1 / (1 + exp(-2u)): the same function, but a
// CPU's exp is several times cheaper than its tanh, and s saturates cleanly to 0 or 1 at either end.
constexpr double gelu_k = 0.7978845608028654;
constexpr double gelu_a = 0.044715;

// x[N, F] -> y[N, F]
template <class T> void gelu_forward(const ExecSpace& space, In2<T> x, const View2<T>& y) {
  const T k = gelu_k, a = gelu_a;
  Kokkos::parallel_for("kpipe::nn::gelu_forward", range2(space, x.extent(0), x.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
                         const T v = x(i, j);
                         const T u = k * (v + a * v * v * v);
                         y(i, j) = v / (T(1) + math::exp(T(-2) * u));
                       });
}

// (x[N, F], dy[N, F]) -> dx[N, F]: the exact derivative of the tanh form,
// dy/dx = (1 + t)/2 + x/2 (1 - t^2) u' = s + 2 x s (1 - s) u',  u' = k (1 + 3 a x^2).
template <class T> void gelu_backward_input(const ExecSpace& space, In2<T> x, In2<T> dy, const View2<T>& dx) {
  const T k = gelu_k, a = gelu_a;
  Kokkos::parallel_for("kpipe::nn::gelu_backward_input", range2(space, x.extent(0), x.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
                         const T v = x(i, j);
                         const T v2 = v * v;
                         const T e = math::exp(T(-2) * k * (v + a * v2 * v));
                         const T s = T(1) / (T(1) + e);
                         // s (1 - s) = e / (1 + e)^2 = 1 / (2 + e + 1/e): no cancellation when s is near 1
                         // (as 1 - s would have), no inf * 0 when e overflows, and no branch.
                         const T s_one_minus_s = T(1) / (T(2) + e + T(1) / e);
                         const T du = k * (T(1) + T(3) * a * v2);
                         dx(i, j) = dy(i, j) * (s + T(2) * v * s_one_minus_s * du);
                       });
}

template void gelu_forward(const ExecSpace&, In2<float>, const View2<float>&);
template void gelu_backward_input(const ExecSpace&, In2<float>, In2<float>, const View2<float>&);
template void gelu_forward(const ExecSpace&, In2<double>, const View2<double>&);
template void gelu_backward_input(const ExecSpace&, In2<double>, In2<double>, const View2<double>&);

}  // namespace kpipe::nn
