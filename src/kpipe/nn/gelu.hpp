#pragma once
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// GeLU, tanh approximation: y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). No parameters.
// Tensors are stored in A (float, double or bf16); the arithmetic runs in accumulation_t<A> (float for
// bf16), and each output is rounded to A once.
// x[N, F] -> y[N, F]
template <class A, KernelPath P = default_kernel_path> void gelu_forward(const ExecSpace& space, In2<A> x,
                                                                         const View2<A>& y);
// f[N, F] += bias[F], then g[N, F] = GeLU(f): the MLP's bias and activation in one pass over f, which
// keeps the biased pre-activation for backward.
template <class T, KernelPath P = default_kernel_path>
void bias_gelu_forward(const ExecSpace& space, In1<T> bias, const View2<T>& f, const View2<T>& g);
// Mixed precision: product[N, F] (in T, the MLP's x W^T) -> f = product + bias and g = GeLU(product + bias),
// both computed in T and each rounded to A once.
template <class T, class A = T, KernelPath P = default_kernel_path>
void bias_gelu_forward(const ExecSpace& space, In1<T> bias, In2<T> product, const View2<A>& f, const View2<A>& g);
// (x[N, F], dy[N, F]) -> dx[N, F]; dx may be dy (in place)
template <class A, KernelPath P = default_kernel_path>
void gelu_backward_input(const ExecSpace& space, In2<A> x, In2<A> dy, const View2<A>& dx);

}  // namespace kpipe::nn
