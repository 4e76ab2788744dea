#pragma once
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// Fully connected layer, y = x W^T + b (W stored [out, in] as in PyTorch, so a checkpoint reads the same).
// An empty bias view means no bias (the LM head).
template <class T> struct Linear {
  View2<T> weight;   // [out, in]
  View1<T> bias;     // [out] or empty
  View2<T> dweight;  // [out, in], accumulated over micro-batches
  View1<T> dbias;    // [out] or empty, accumulated over micro-batches
};

// x[N, in] -> y[N, out]
template <class T, KernelPath P = default_kernel_path>
void forward(const ExecSpace& space, const Linear<T>& layer, In2<T> x, const View2<T>& y);
// x[N, in] -> y[N, out] = x W^T: the bias is left to a fused epilogue that reads y anyway (bias_gelu_forward)
template <class T> void forward_product(const ExecSpace& space, const Linear<T>& layer, In2<T> x, const View2<T>& y);
// x[N, in], residual[N, out] -> y[N, out] = residual + x W^T + b (the residual add fused into the product)
template <class T, KernelPath P = default_kernel_path>
void forward_residual(const ExecSpace& space, const Linear<T>& layer, In2<T> x, In2<T> residual, const View2<T>& y);
// dy[N, out] -> dx[N, in] (overwritten, or added to when accumulate)
template <class T>
void backward_input(const ExecSpace& space, const Linear<T>& layer, In2<T> dy, const View2<T>& dx,
                    bool accumulate = false);
// (x[N, in], dy[N, out]) -> dweight += dy^T x, dbias += sum_rows dy
template <class T, KernelPath P = default_kernel_path>
void backward_weight(const ExecSpace& space, const Linear<T>& layer, In2<T> x, In2<T> dy);

}  // namespace kpipe::nn
