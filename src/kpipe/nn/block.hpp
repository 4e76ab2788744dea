#pragma once
// The GPT block, pre-LayerNorm:  x2 = x + proj(attention(qkv(ln1(x))));  out = x2 + fc_proj(gelu(fc(ln2(x2)))).
// Backward is split like every layer's: backward_input computes the gradient w.r.t. x and leaves the
// block's inner gradients in BlockGrads; backward_weight turns them into parameter gradients later
// (immediately for a full backward, after other work in a zero-bubble schedule).
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

template <class T> BlockStash<T> allocate_stash(const Block<T>& block);
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
// parameter gradients += from (x, stash, grads, dout)
template <class T>
void backward_weight(const ExecSpace& space, const Block<T>& block, In2<T> x, const BlockStash<T>& stash,
                     const BlockGrads<T>& grads, In2<T> dout);

}  // namespace kpipe::nn
