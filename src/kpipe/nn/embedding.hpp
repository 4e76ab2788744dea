#pragma once
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// Token plus learned position embedding.
template <class T> struct Embedding {
  View2<T> token;      // [V, C]
  View2<T> position;   // [T_max, C]
  View2<T> dtoken;     // [V, C], accumulated
  View2<T> dposition;  // [T_max, C], accumulated
};

// tokens[B*T] (sequence b at rows b*T..b*T+T-1) -> out[B*T, C]. A token id outside [0, V) is never read
// from the table: its row comes out NaN, so the loss is not finite and the trainer reports the step.
template <class T>
void forward(const ExecSpace& space, const Embedding<T>& emb, const View1<const Token>& tokens, int seq,
             const View2<T>& out);
// dtoken[tokens[i]] += dout[i], dposition[i mod T] += dout[i], summed in a fixed order (reproducible
// on every backend: no atomics). Rows of out-of-range ids add nothing.
template <class T, KernelPath P = default_kernel_path>
void backward_weight(const ExecSpace& space, const Embedding<T>& emb, const View1<const Token>& tokens, int seq,
                     In2<T> dout);

}  // namespace kpipe::nn
