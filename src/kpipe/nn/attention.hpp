#pragma once
// Causal multi-head self-attention core: from fused q|k|v to the heads' concatenated output. The
// projections around it are Linear layers of the block.
//
// Memory linear in the sequence length, as flash attention does it: the forward keeps per query row the
// softmax's maximum and reciprocal sum, not the T x T probabilities, and the backward recomputes the
// probabilities block by block from q k^T and those statistics, with the same product and the same
// expression as the forward, so to the same bits. Every product is a strided-batched gemm over all the
// micro-batch's heads at once (cuBLAS on CUDA builds, tensor cores in bf16), on head-major copies of q, k and v.
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

struct AttentionShape {
  int batch = 0, seq = 0, heads = 0, head_dim = 0;
  int channels() const { return heads * head_dim; }
  std::int64_t rows() const { return std::int64_t(batch) * seq; }
  std::int64_t heads_in_batch() const { return std::int64_t(batch) * heads; }
};

// Query rows per block of the T x T products. A block of rows r0..r1-1 needs keys 0..r1-1 only, so the products
// skip most of the masked upper triangle; the work buffers hold one block, [B*H, rows, T], linear in T.
inline constexpr int attention_block_rows = 128;
inline int block_rows(const AttentionShape& shape) {
  return shape.seq < attention_block_rows ? shape.seq : attention_block_rows;
}

// Storage and arithmetic: q|k|v, out and the gradients are stored in A (T, or bf16 with T = float). Scores, the
// softmax and its backward, the statistics and every product's sums run in T; each stored tensor is rounded to A
// once, when written: a block's probabilities and dL/d(q k^T) (the operands of the products after them), out
// and dq|dk|dv.

// What the backward pass of one micro-batch needs: kept from forward until backward_input.
template <class T, class A = T> struct AttentionStash {
  View2<A> qkv;      // [B*T, 3C]: q | k | v as the projection wrote them
  View3<T> softmax;  // [B*H, T, 2]: per query row, max_j of the scaled scores and 1 / sum_j exp(scaled - max)
};

// Scratch that every call overwrites; one per stage is enough. Head-major means [B*H, T, hd], head h of
// sequence b at b*H + h: the layout in which every head is one matrix of a strided batch.
template <class T, class A = T> struct AttentionWork {
  View3<A> q, k, v;  // head-major copies of q|k|v
  View3<A> o;        // forward: the heads' output; backward: dL/dout of each head
  View3<A> dq;       // backward: dL/dq of each head
  View3<T> dk, dv;   // backward: sums over the query blocks, in T, rounded to A once at the end
  View3<T> scores;   // [B*H, rows, T]: a block of q k^T; the probabilities in place when A is T
  View3<T> dprobs;   // [B*H, rows, T]: a block of dL/dprobs; dL/d(q k^T) in place when A is T
  View3<A> probs, dscores;  // [B*H, rows, T] in A, when A is not T
  View1<float> workspace;   // blas::gemm's, for the host path's products of bf16 operands
};

// Both parts, or the ones asked for (the others stay empty: a block that recomputes them keeps them elsewhere).
template <class T, class A = T>
AttentionStash<T, A> allocate_stash(const AttentionShape& shape, bool qkv = true, bool softmax = true);
template <class T, class A = T> AttentionWork<T, A> allocate_work(const AttentionShape& shape);
// Elements of the work buffers: in T (dk, dv and the blocks' T buffers), in A (the head-major copies and, when
// A is not T, the blocks' A buffers), and the floats of the host path's product workspace (0 but for bf16 on
// host builds without a vendor bf16 product).
struct AttentionWorkElements {
  std::int64_t t = 0, a = 0, workspace = 0;
};
template <class T, class A> AttentionWorkElements attention_work_elements(const AttentionShape& shape);
// Elements of the softmax statistics of one micro-batch (in T): 2 per head and query row.
inline std::int64_t attention_softmax_elements(const AttentionShape& shape) {
  return 2 * shape.heads_in_batch() * shape.seq;
}

// qkv[B*T, 3C] (q | k | v, head h in columns h*hd..h*hd+hd-1 of each) -> out[B*T, C]. qkv is kept in
// stash.qkv; when it is stash.qkv itself (the block's projection writes it there) nothing is copied.
template <class T, class A = T, KernelPath P = default_kernel_path>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, In2<A> qkv,
                       const AttentionStash<T, A>& stash, const AttentionWork<T, A>& work, const View2<A>& out);
// dout[B*T, C] -> dqkv[B*T, 3C]
template <class T, class A = T, KernelPath P = default_kernel_path>
void attention_backward_input(const ExecSpace& space, const AttentionShape& shape, const AttentionStash<T, A>& stash,
                              const AttentionWork<T, A>& work, In2<A> dout, const View2<A>& dqkv);

// Floating-point operations of forward, counting the full T x T products; backward does five products to
// forward's two (it computes q k^T again).
double attention_forward_flops(const AttentionShape& shape);

}  // namespace kpipe::nn
