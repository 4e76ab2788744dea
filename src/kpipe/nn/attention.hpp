#pragma once
// Causal multi-head self-attention core: from fused q|k|v to the heads' concatenated output. The
// projections around it are Linear layers of the block.
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

struct AttentionShape {
  int batch = 0, seq = 0, heads = 0, head_dim = 0;
  int channels() const { return heads * head_dim; }
  std::int64_t rows() const { return std::int64_t(batch) * seq; }
};

// Storage and arithmetic: q|k|v, the probabilities, out and the gradients are stored in A (T, or bf16 with
// T = float). Scores, the softmax and its backward, and every product's sums run in T; each stored tensor is
// rounded to A once, when written: the probabilities after the softmax, dL/d(q k^T) after the softmax
// backward (the operand of the dq and dk products), out and dq|dk|dv after their sums.

// What the backward pass of one micro-batch needs: kept from forward until backward_input.
template <class A> struct AttentionStash {
  View2<A> qkv;    // [B*T, 3C]: q | k | v as the projection wrote them; heads are read in place from it
  View4<A> probs;  // [B, H, T, T], causal softmax of q k^T / sqrt(hd); zero above the diagonal
};

// Scratch that every call overwrites; one per stage is enough. (Per-head products read and write the
// [B*T, C] activations in place through LayoutRight column slices, so no per-head copies are needed.)
template <class T, class A = T> struct AttentionWork {
  View4<T> dprobs;   // [B, H, T, T]: dL/dprobs; when A is not T also forward's raw scores, which the softmax reads in T
  View4<A> dscores;  // [B, H, T, T]: dL/d(q k^T) in A, when A is not T (otherwise dprobs, overwritten in place)
  View1<float> workspace;  // blas::gemm's, for the host path's products of bf16 operands
};

// Both parts, or the ones asked for (the others stay empty: a block that recomputes them keeps them elsewhere).
template <class A> AttentionStash<A> allocate_stash(const AttentionShape& shape, bool qkv = true, bool probs = true);
template <class T, class A = T> AttentionWork<T, A> allocate_work(const AttentionShape& shape);
// Elements of the work buffers: [B, H, T, T] in T, the same in A when A is not T, and the floats of the
// host path's product workspace (0 but for bf16 on host builds).
struct AttentionWorkElements {
  std::int64_t t = 0, a = 0, workspace = 0;
};
template <class T, class A> AttentionWorkElements attention_work_elements(const AttentionShape& shape);

// qkv[B*T, 3C] (q | k | v, head h in columns h*hd..h*hd+hd-1 of each) -> out[B*T, C]. qkv is kept in
// stash.qkv; when it is stash.qkv itself (the block's projection writes it there) nothing is copied.
template <class T, KernelPath P = default_kernel_path, class A = T>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, In2<A> qkv, const AttentionStash<A>& stash,
                       const AttentionWork<T, A>& work, const View2<A>& out);
// dout[B*T, C] -> dqkv[B*T, 3C]
template <class T, KernelPath P = default_kernel_path, class A = T>
void attention_backward_input(const ExecSpace& space, const AttentionShape& shape, const AttentionStash<A>& stash,
                              const AttentionWork<T, A>& work, In2<A> dout, const View2<A>& dqkv);

// Floating-point operations of forward (backward is twice that), counting the full T x T products.
double attention_forward_flops(const AttentionShape& shape);

}  // namespace kpipe::nn
