#include "kpipe/nn/gelu.hpp"

#include "kpipe/core/math.hpp"

namespace kpipe::nn {

// The tanh form's constants: y = x/2 (1 + tanh(k (x + a x^3))), k = sqrt(2/pi), a = 0.044715.
constexpr double gelu_k = 0.7978845608028654;
constexpr double gelu_a = 0.044715;

// x[N, F] -> y[N, F]
template <class T> void gelu_forward(const ExecSpace& space, In2<T> x, const View2<T>& y) {
  const T k = gelu_k, a = gelu_a;
  Kokkos::parallel_for("kpipe::nn::gelu_forward", range2(space, x.extent(0), x.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
                         const T v = x(i, j);
                         const T u = k * (v + a * v * v * v);
                         y(i, j) = T(0.5) * v * (T(1) + math::tanh(u));
                       });
}

// (x[N, F], dy[N, F]) -> dx[N, F]: the exact derivative of the tanh form,
// dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 a x^2), t = tanh(k (x + a x^3)).
template <class T> void gelu_backward_input(const ExecSpace& space, In2<T> x, In2<T> dy, const View2<T>& dx) {
  const T k = gelu_k, a = gelu_a;
  Kokkos::parallel_for("kpipe::nn::gelu_backward_input", range2(space, x.extent(0), x.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
                         const T v = x(i, j);
                         const T v2 = v * v;
                         const T t = math::tanh(k * (v + a * v2 * v));
                         const T du = k * (T(1) + T(3) * a * v2);
                         const T slope = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du;
                         dx(i, j) = dy(i, j) * slope;
                       });
}

template void gelu_forward(const ExecSpace&, In2<float>, const View2<float>&);
template void gelu_backward_input(const ExecSpace&, In2<float>, In2<float>, const View2<float>&);
template void gelu_forward(const ExecSpace&, In2<double>, const View2<double>&);
template void gelu_backward_input(const ExecSpace&, In2<double>, In2<double>, const View2<double>&);

}  // namespace kpipe::nn
