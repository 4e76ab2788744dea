#pragma once
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// GeLU, tanh approximation: y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). No parameters.
// x[N, F] -> y[N, F]
template <class T, KernelPath P = default_kernel_path> void gelu_forward(const ExecSpace& space, In2<T> x, const View2<T>& y);
// f[N, F] += bias[F], then g[N, F] = GeLU(f): the MLP's bias and activation in one pass over f, which
// keeps the biased pre-activation for backward.
template <class T, KernelPath P = default_kernel_path>
void bias_gelu_forward(const ExecSpace& space, In1<T> bias, const View2<T>& f, const View2<T>& g);
// (x[N, F], dy[N, F]) -> dx[N, F]
template <class T, KernelPath P = default_kernel_path>
void gelu_backward_input(const ExecSpace& space, In2<T> x, In2<T> dy, const View2<T>& dx);

}  // namespace kpipe::nn
