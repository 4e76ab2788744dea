#pragma once
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// Layer normalization over the feature dimension, y = (x - mean) * rstd * gamma + beta.
template <class T> struct LayerNorm {
  View1<T> gamma, beta;    // [C]
  View1<T> dgamma, dbeta;  // [C], accumulated over micro-batches
  T eps = T(1e-5);
};

// x[N, C] -> y[N, C]; stashes mean[N] and rstd[N] for the backward pass. One pass over each row.
template <class T, KernelPath P = default_kernel_path>
void forward(const ExecSpace& space, const LayerNorm<T>& ln, In2<T> x, const View2<T>& y, const View1<T>& mean,
             const View1<T>& rstd);
// dy[N, C] -> dx[N, C] (overwritten, or added to when accumulate: the residual stream's gradient).
template <class T, KernelPath P = default_kernel_path>
void backward_input(const ExecSpace& space, const LayerNorm<T>& ln, In2<T> x, In1<T> mean, In1<T> rstd, In2<T> dy,
                    const View2<T>& dx, bool accumulate = false);
// dgamma += sum_rows dy * xhat, dbeta += sum_rows dy
template <class T, KernelPath P = default_kernel_path>
void backward_weight(const ExecSpace& space, const LayerNorm<T>& ln, In2<T> x, In1<T> mean, In1<T> rstd,
                     In2<T> dy);

}  // namespace kpipe::nn
