#pragma once
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// Token plus learned position embedding. The tables and their gradients are in T; the output and its
// gradient are stored in A (T, or bf16 with T = float): out is the sum in T rounded once, and the tables'
// gradients accumulate in T.
template <class T, class A = T> struct Embedding {
  View2<T> token;      // [V, C]
  View2<T> position;   // [T_max, C]
  View2<T> dtoken;     // [V, C], accumulated
  View2<T> dposition;  // [T_max, C], accumulated
};

// tokens[B*T] (sequence b at rows b*T..b*T+T-1) -> out[B*T, C]. A token id outside [0, V) is never read
// from the table: its row comes out NaN, so the loss is not finite and the trainer reports the step.
template <class T, class A = T>
void forward(const ExecSpace& space, const Embedding<T, A>& emb, const View1<const Token>& tokens, int seq,
             const View2<A>& out);
// The token gradient sums each token's rows in pieces of at most this many: the rows sorted by (token, row) are
// cut at every multiple of embedding_piece_rows positions, so no work item walks more rows than that, however
// frequent its token, and a token's sum is its pieces' sums in order.
inline constexpr int embedding_piece_rows = 128;

// backward_weight's scratch, overwritten by every call.
template <class T> struct EmbeddingScratch {
  View1<std::int64_t> order;  // [B*T]: the rows sorted by (token, row)
  View2<T> pieces;            // [B*T, C]: at a piece's first sorted position, the sum of its rows
};
template <class T> EmbeddingScratch<T> allocate_scratch(std::int64_t rows, std::int64_t channels);
template <class T> std::int64_t scratch_bytes(std::int64_t rows, std::int64_t channels);

// dtoken[tokens[i]] += dout[i], dposition[i mod T] += dout[i], summed in a fixed order (reproducible on every
// backend and layout: no atomics). Rows of out-of-range ids add nothing.
template <class T, class A = T, KernelPath P = default_kernel_path>
void backward_weight(const ExecSpace& space, const Embedding<T, A>& emb, const View1<const Token>& tokens, int seq,
                     In2<A> dout, const EmbeddingScratch<T>& scratch);

}  // namespace kpipe::nn
