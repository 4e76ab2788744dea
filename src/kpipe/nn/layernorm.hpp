#pragma once
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// Layer normalization over the feature dimension, y = (x - mean) * rstd * gamma + beta.
// x, y, dy and dx are stored in A (T, or bf16 with T = float); the statistics, gamma, beta and their
// gradients are in T, and every sum runs in T. A value stored in A is rounded once, when written.
template <class T, class A = T> struct LayerNorm {
  View1<T> gamma, beta;    // [C]
  View1<T> dgamma, dbeta;  // [C], accumulated over micro-batches
  T eps = T(1e-5);
};

// x[N, C] -> y[N, C]; stashes mean[N] and rstd[N] for the backward pass. One pass over each row.
template <class T, class A = T, KernelPath P = default_kernel_path>
void forward(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<A> x, const View2<A>& y, const View1<T>& mean,
             const View1<T>& rstd);
// The residual stream's add and the LayerNorm after it, in one pass over each row (mixed precision, where a
// product in T is added to the stream anyway): sum[N, C] = product + bias + residual, rounded once to A as
// Linear's forward_residual rounds it, then y[N, C] = LayerNorm(sum) with mean[N] and rstd[N] as forward gives
// them from sum: the same bits as those two kernels. bias may be empty; residual lies apart from sum.
template <class T, class A = T, KernelPath P = default_kernel_path>
void add_residual_forward(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<T> product, In1<T> bias,
                          In2<A> residual, const View2<A>& sum, const View2<A>& y, const View1<T>& mean,
                          const View1<T>& rstd);
// dy[N, C] -> dx[N, C] = residual + (dL/dx through the LayerNorm), rounded once. residual[N, C] is the gradient
// the residual stream carries past the LayerNorm: empty (dx is overwritten), another buffer (the block's
// dout, so that no copy of it into dx is needed first), or dx itself (added to in place).
template <class T, class A = T, KernelPath P = default_kernel_path>
void backward_input(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<A> x, In1<T> mean, In1<T> rstd, In2<A> dy,
                    const View2<A>& dx, In2<A> residual = {});
// dgamma += sum_rows dy * xhat, dbeta += sum_rows dy
template <class T, class A = T, KernelPath P = default_kernel_path>
void backward_weight(const ExecSpace& space, const LayerNorm<T, A>& ln, In2<A> x, In1<T> mean, In1<T> rstd,
                     In2<A> dy);

}  // namespace kpipe::nn
