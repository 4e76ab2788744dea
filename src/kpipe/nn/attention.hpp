#pragma once
// Causal multi-head self-attention core: from fused q|k|v to the heads' concatenated output. The
// projections around it are Linear layers of the block.
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

struct AttentionShape {
  int batch = 0, seq = 0, heads = 0, head_dim = 0;
  int channels() const { return heads * head_dim; }
  std::int64_t rows() const { return std::int64_t(batch) * seq; }
};

// What the backward pass of one micro-batch needs: kept from forward until backward_input.
template <class T> struct AttentionStash {
  View2<T> qkv;    // [B*T, 3C]: q | k | v as the projection wrote them; heads are read in place from it
  View4<T> probs;  // [B, H, T, T], causal softmax of q k^T / sqrt(hd); zero above the diagonal
};

// Scratch that every call overwrites; one per stage is enough. (Per-head products read and write the
// [B*T, C] activations in place through LayoutRight column slices, so no per-head copies are needed.)
template <class T> struct AttentionWork {
  View4<T> dprobs;  // [B, H, T, T]
};

// Both parts, or the ones asked for (the others stay empty: a block that recomputes them keeps them elsewhere).
template <class T> AttentionStash<T> allocate_stash(const AttentionShape& shape, bool qkv = true, bool probs = true);
template <class T> AttentionWork<T> allocate_work(const AttentionShape& shape);

// qkv[B*T, 3C] (q | k | v, head h in columns h*hd..h*hd+hd-1 of each) -> out[B*T, C]. qkv is kept in
// stash.qkv; when it is stash.qkv itself (the block's projection writes it there) nothing is copied.
template <class T, KernelPath P = default_kernel_path>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, In2<T> qkv, const AttentionStash<T>& stash,
                       const AttentionWork<T>& work, const View2<T>& out);
// dout[B*T, C] -> dqkv[B*T, 3C]
template <class T, KernelPath P = default_kernel_path>
void attention_backward_input(const ExecSpace& space, const AttentionShape& shape, const AttentionStash<T>& stash,
                              const AttentionWork<T>& work, In2<T> dout, const View2<T>& dqkv);

// Floating-point operations of forward (backward is twice that), counting the full T x T products.
double attention_forward_flops(const AttentionShape& shape);

}  // namespace kpipe::nn
