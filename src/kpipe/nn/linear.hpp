#pragma once
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/products.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// Fully connected layer, y = x W^T + b (W stored [out, in] as in PyTorch, so a checkpoint reads the same).
// An empty bias view means no bias (the LM head).
// T is the accumulation (and master) type, A the storage of activations, of the gradients passed between
// layers and of the weights' compute copy: T itself, or bf16 with T = float (mixed precision). Mixed: the
// products take A operands and accumulate in T; y is rounded to A once, after bias and residual are added
// in T; dx is rounded to A once; weight and bias gradients accumulate in T.
template <class T, class A = T> struct Linear {
  View2<A> weight;   // [out, in]: what the products read (the master values when A is T, else their copy in A)
  View1<T> bias;     // [out] or empty
  View2<T> dweight;  // [out, in], accumulated over micro-batches
  View1<T> dbias;    // [out] or empty, accumulated over micro-batches
  Products<T> products = {};  // math mode, and the scratch of mixed-precision products
};

// The scratch the layer's products need for `rows` rows (none when A is T).
template <class T, class A> ProductsSize linear_products_size(std::int64_t rows, std::int64_t in, std::int64_t out) {
  ProductsSize s;
  if constexpr (mixed_precision<T, A>) {
    s.accumulator = rows * out;  // forward's x W^T before the epilogue
    s.workspace = std::max({blas::workspace_elements<A, T>(rows, out, in),       // forward
                            blas::workspace_elements<A, A>(rows, in, out),       // backward_input
                            blas::workspace_elements<A, T>(out, in, rows)});     // backward_weight
  }
  return s;
}

// x[N, in] -> y[N, out]
template <class T, class A = T, KernelPath P = default_kernel_path>
void forward(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, const View2<A>& y);
// x[N, in] -> y[N, out] = x W^T in T (not rounded): the bias is left to an epilogue that reads y anyway
// (bias_gelu_forward), or there is none (the LM head's logits).
template <class T, class A = T>
void forward_product(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, const View2<T>& y);
// Mixed precision's epilogue of one element: product + bias + residual in T, rounded to A once (zero for an
// absent bias or residual). The one expression every kernel that finishes a product this way evaluates
// (forward_residual, LayerNorm's add_residual_forward), so that they round alike.
template <class A, class T> KOKKOS_INLINE_FUNCTION A epilogue(T product, T bias, T residual) {
  return narrow<A>(product + bias + residual);
}
// x[N, in], residual[N, out] -> y[N, out] = residual + x W^T + b (the residual add fused into the product)
template <class T, class A = T, KernelPath P = default_kernel_path>
void forward_residual(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, In2<A> residual, const View2<A>& y);
// dy[N, out] -> dx[N, in] (overwritten, or added to when accumulate)
template <class T, class A = T>
void backward_input(const ExecSpace& space, const Linear<T, A>& layer, In2<A> dy, const View2<A>& dx,
                    bool accumulate = false);
// (x[N, in], dy[N, out]) -> dweight += dy^T x, dbias += sum_rows dy
template <class T, class A = T, KernelPath P = default_kernel_path>
void backward_weight(const ExecSpace& space, const Linear<T, A>& layer, In2<A> x, In2<A> dy);

}  // namespace kpipe::nn
