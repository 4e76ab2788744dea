#pragma once
// The GPT block, pre-LayerNorm:  x2 = x + proj(attention(qkv(ln1(x))));  out = x2 + fc_proj(gelu(fc(ln2(x2)))).
// Backward is split like every layer's: backward_input computes the gradient w.r.t. x and leaves the
// block's inner gradients in BlockGrads; backward_weight turns them into parameter gradients later
// (immediately for a full backward, after other work in a zero-bubble schedule).
// Precision (T accumulation, A storage; see each layer): every activation, inner gradient and message is
// stored in A and rounded once when written; LayerNorm statistics are kept in T.
#include <string>

#include "kpipe/core/config.hpp"

#include "kpipe/nn/attention.hpp"
#include "kpipe/nn/layernorm.hpp"
#include "kpipe/nn/linear.hpp"

namespace kpipe::nn {

template <class T, class A = T> struct Block {
  LayerNorm<T, A> ln1, ln2;
  Linear<T, A> qkv, proj, fc, fc_proj;
  AttentionShape shape;  // per micro-batch
  int hidden = 0;        // MLP width F
};

// What backward needs from forward (one per micro-batch in flight). N = batch * seq rows.
template <class T, class A = T> struct BlockStash {
  View2<A> h1;            // [N, C] ln1(x)
  View1<T> mean1, rstd1;  // [N]
  AttentionStash<T, A> attn;
  View2<A> att;           // [N, C] heads' output, input of proj
  View2<A> x2;            // [N, C] x + proj(att)
  View2<A> h2;            // [N, C] ln2(x2)
  View1<T> mean2, rstd2;  // [N]
  View2<A> f;             // [N, F] fc(h2), before GeLU
  View2<A> g;             // [N, F] gelu(f)
  View2<A> out;           // [N, C]
};

// Inner gradients from backward_input, consumed by backward_weight.
template <class T, class A = T> struct BlockGrads {
  View2<A> df;    // [N, F] dL/df
  View2<A> dh2;   // [N, C]
  View2<A> dx2;   // [N, C]
  View2<A> dqkv;  // [N, 3C]
  View2<A> dh1;   // [N, C]
};

// Scratch every call overwrites (one per stage).
template <class T, class A = T> struct BlockWork {
  View2<A> datt;  // [N, C]
  AttentionWork<T, A> attn;
};

// Activation recomputation: which of a block's activations a micro-batch keeps from its forward to its
// backward. What is not kept is written to a scratch buffer during the forward and computed again, with
// the same kernels on the same inputs (so to the same bits), at the start of the block's backward_input.
//   none       keep everything
//   attention  drop the attention core's output [N, C] and softmax statistics; recompute them from q|k|v
//   mlp        drop the MLP's two [N, F] tensors; recompute them from ln2's output
//   block      keep only the block's output (the next layer's input); recompute the rest from the input
// (The key memory.recompute: kpipe::Recompute, core/config.hpp.)
using kpipe::Recompute;

// The stash's fields in groups, as bits (a set of groups is their OR).
namespace stash_field {
constexpr unsigned ln1 = 1u << 0;    // h1, mean1, rstd1
constexpr unsigned qkv = 1u << 1;    // attn.qkv
constexpr unsigned softmax = 1u << 2;  // attn.softmax
constexpr unsigned att = 1u << 3;
constexpr unsigned x2 = 1u << 4;
constexpr unsigned ln2 = 1u << 5;    // h2, mean2, rstd2
constexpr unsigned f = 1u << 6;
constexpr unsigned g = 1u << 7;
constexpr unsigned out = 1u << 8;
constexpr unsigned all = (1u << 9) - 1;
}  // namespace stash_field

// Kept from forward until the micro-batch's backward is done (in its activation slot).
unsigned kept_fields(Recompute mode);
// Recomputed before backward_input into the micro-batch's backward buffers, because backward_weight reads
// them too; the other dropped fields are recomputed into the chunk's scratch, which only backward_input reads.
unsigned weight_fields(Recompute mode);
// Elements of the given fields for one micro-batch of `shape` (for memory accounting), and of the block's
// gradients and work buffers, when A is T.
std::int64_t stash_elements(unsigned fields, const AttentionShape& shape, int hidden);
std::int64_t grads_elements(const AttentionShape& shape, int hidden);
std::int64_t work_elements(const AttentionShape& shape);
// The same in bytes, for any T and A: what allocate_stash, allocate_grads and allocate_work allocate.
template <class T, class A> std::int64_t stash_bytes(unsigned fields, const AttentionShape& shape, int hidden);
template <class T, class A> std::int64_t grads_bytes(const AttentionShape& shape, int hidden);
template <class T, class A> std::int64_t work_bytes(const AttentionShape& shape);
// The scratch of the block's four Linear layers' products (none when A is T).
template <class T, class A> ProductsSize block_products_size(const AttentionShape& shape, int hidden);

// Allocates the given fields of the stash (the others stay empty views).
template <class T, class A>
BlockStash<T, A> allocate_stash(const Block<T, A>& block, unsigned fields = stash_field::all);
// Field by field: a's view where a has one, else b's.
template <class T, class A> BlockStash<T, A> overlay(const BlockStash<T, A>& a, const BlockStash<T, A>& b);
template <class T, class A> BlockGrads<T, A> allocate_grads(const Block<T, A>& block);
template <class T, class A> BlockWork<T, A> allocate_work(const Block<T, A>& block);

// x[N, C] -> stash.out[N, C]
template <class T, class A>
void forward(const ExecSpace& space, const Block<T, A>& block, In2<A> x, const BlockStash<T, A>& stash,
             const BlockWork<T, A>& work);
// dout[N, C] -> dx[N, C]; inner gradients into grads
template <class T, class A>
void backward_input(const ExecSpace& space, const Block<T, A>& block, In2<A> x, const BlockStash<T, A>& stash,
                    const BlockGrads<T, A>& grads, const BlockWork<T, A>& work, In2<A> dout, const View2<A>& dx);
// The fields `mode` drops, computed again from x and the kept fields into stash (exactly what forward wrote).
template <class T, class A>
void recompute(const ExecSpace& space, const Block<T, A>& block, Recompute mode, In2<A> x,
               const BlockStash<T, A>& stash, const BlockWork<T, A>& work);
// parameter gradients += from (x, stash, grads, dout)
template <class T, class A>
void backward_weight(const ExecSpace& space, const Block<T, A>& block, In2<A> x, const BlockStash<T, A>& stash,
                     const BlockGrads<T, A>& grads, In2<A> dout);

}  // namespace kpipe::nn
