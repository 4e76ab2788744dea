#pragma once
// The GPT block, pre-LayerNorm:  x2 = x + proj(attention(qkv(ln1(x))));  out = x2 + fc_proj(gelu(fc(ln2(x2)))).
// Backward is split like every layer's: backward_input computes the gradient w.r.t. x and leaves the
// block's inner gradients in BlockGrads; backward_weight turns them into parameter gradients later
// (immediately for a full backward, after other work in a zero-bubble schedule).
#include <string>

#include "kpipe/core/config.hpp"

#include "kpipe/nn/attention.hpp"
#include "kpipe/nn/layernorm.hpp"
#include "kpipe/nn/linear.hpp"

namespace kpipe::nn {

template <class T> struct Block {
  LayerNorm<T> ln1, ln2;
  Linear<T> qkv, proj, fc, fc_proj;
  AttentionShape shape;  // per micro-batch
  int hidden = 0;        // MLP width F
};

// What backward needs from forward (one per micro-batch in flight). N = batch * seq rows.
template <class T> struct BlockStash {
  View2<T> h1;            // [N, C] ln1(x)
  View1<T> mean1, rstd1;  // [N]
  AttentionStash<T> attn;
  View2<T> att;           // [N, C] heads' output, input of proj
  View2<T> x2;            // [N, C] x + proj(att)
  View2<T> h2;            // [N, C] ln2(x2)
  View1<T> mean2, rstd2;  // [N]
  View2<T> f;             // [N, F] fc(h2), before GeLU
  View2<T> g;             // [N, F] gelu(f)
  View2<T> out;           // [N, C]
};

// Inner gradients from backward_input, consumed by backward_weight.
template <class T> struct BlockGrads {
  View2<T> df;    // [N, F] dL/df
  View2<T> dh2;   // [N, C]
  View2<T> dx2;   // [N, C]
  View2<T> dqkv;  // [N, 3C]
  View2<T> dh1;   // [N, C]
};

// Scratch every call overwrites (one per stage).
template <class T> struct BlockWork {
  View2<T> datt;  // [N, C]
  AttentionWork<T> attn;
};

// Activation recomputation: which of a block's activations a micro-batch keeps from its forward to its
// backward. What is not kept is written to a scratch buffer during the forward and computed again, with
// the same kernels on the same inputs (so to the same bits), at the start of the block's backward_input.
//   none       keep everything
//   attention  drop the attention core's output and probabilities [B, H, T, T]; recompute them from q|k|v
//   mlp        drop the MLP's two [N, F] tensors; recompute them from ln2's output
//   block      keep only the block's output (the next layer's input); recompute the rest from the input
// (The key memory.recompute: kpipe::Recompute, core/config.hpp.)
using kpipe::Recompute;

// The stash's fields in groups, as bits (a set of groups is their OR).
namespace stash_field {
constexpr unsigned ln1 = 1u << 0;    // h1, mean1, rstd1
constexpr unsigned qkv = 1u << 1;    // attn.qkv
constexpr unsigned probs = 1u << 2;  // attn.probs
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
// gradients and work buffers.
std::int64_t stash_elements(unsigned fields, const AttentionShape& shape, int hidden);
std::int64_t grads_elements(const AttentionShape& shape, int hidden);
std::int64_t work_elements(const AttentionShape& shape);

// Allocates the given fields of the stash (the others stay empty views).
template <class T> BlockStash<T> allocate_stash(const Block<T>& block, unsigned fields = stash_field::all);
// Field by field: a's view where a has one, else b's.
template <class T> BlockStash<T> overlay(const BlockStash<T>& a, const BlockStash<T>& b);
template <class T> BlockGrads<T> allocate_grads(const Block<T>& block);
template <class T> BlockWork<T> allocate_work(const Block<T>& block);

// x[N, C] -> stash.out[N, C]
template <class T>
void forward(const ExecSpace& space, const Block<T>& block, In2<T> x, const BlockStash<T>& stash,
             const BlockWork<T>& work);
// dout[N, C] -> dx[N, C]; inner gradients into grads
template <class T>
void backward_input(const ExecSpace& space, const Block<T>& block, In2<T> x, const BlockStash<T>& stash,
                    const BlockGrads<T>& grads, const BlockWork<T>& work, In2<T> dout, const View2<T>& dx);
// The fields `mode` drops, computed again from x and the kept fields into stash (exactly what forward wrote).
template <class T>
void recompute(const ExecSpace& space, const Block<T>& block, Recompute mode, In2<T> x, const BlockStash<T>& stash,
               const BlockWork<T>& work);
// parameter gradients += from (x, stash, grads, dout)
template <class T>
void backward_weight(const ExecSpace& space, const Block<T>& block, In2<T> x, const BlockStash<T>& stash,
                     const BlockGrads<T>& grads, In2<T> dout);

}  // namespace kpipe::nn
