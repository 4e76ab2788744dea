#include "kpipe/nn/attention.hpp"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "kpipe/core/blas.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"

namespace kpipe::nn {

// Helpers for the attention kernels. A named namespace, not an anonymous one: kernels may not be
// lambdas in anonymous namespaces (CUDA).
namespace attention_detail {

// The causal T x T products are computed in blocks of this many query rows (or key columns): a block
// of rows r0..r1-1 only needs keys 0..r1-1, so the products skip most of the masked upper triangle
// (about (n+1)/2n of the full work with n blocks) at the price of n calls per head instead of one.
constexpr int causal_block = 64;

using Range = std::pair<std::int64_t, std::int64_t>;

// One head of a [B, H, T, x] tensor as a [T, x] matrix. Subviews of a LayoutRight view that keep the
// last index a range stay LayoutRight (with a leading dimension), which is what sends gemm to the vendor
// BLAS (OpenBLAS, cuBLAS) instead of Kokkos Kernels' generic fallback.
template <class T> auto head(const View4<T>& x, std::int64_t b, std::int64_t h) {
  return Kokkos::subview(x, b, h, Kokkos::ALL, Kokkos::ALL);
}
template <class M> auto rows(const M& m, std::int64_t r0, std::int64_t r1) {
  return Kokkos::subview(m, Range(r0, r1), Kokkos::ALL);
}
template <class M> auto block(const M& m, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  return Kokkos::subview(m, Range(r0, r1), Range(c0, c1));
}
static_assert(std::is_same_v<typename decltype(head(View4<float>(), 0, 0))::array_layout, Kokkos::LayoutRight>,
              "a head of a LayoutRight [B, H, T, x] view must be LayoutRight for the BLAS path");
static_assert(std::is_same_v<typename decltype(block(head(View4<float>(), 0, 0), 0, 1, 0, 1))::array_layout,
                             Kokkos::LayoutRight>,
              "a block of a head must stay LayoutRight for the BLAS path");

inline void require_positive(const AttentionShape& shape) {
  require(shape.batch > 0, "attention: batch must be positive, got {}", shape.batch);
  require(shape.seq > 0, "attention: seq must be positive, got {}", shape.seq);
  require(shape.heads > 0, "attention: heads must be positive, got {}", shape.heads);
  require(shape.head_dim > 0, "attention: head_dim must be positive, got {}", shape.head_dim);
}

template <class V> void require_extents(const char* name, const V& view, std::int64_t e0, std::int64_t e1) {
  require(std::int64_t(view.extent(0)) == e0 && std::int64_t(view.extent(1)) == e1,
          "attention: {} must be [{}, {}], got [{}, {}]", name, e0, e1, view.extent(0), view.extent(1));
}

template <class V>
void require_extents(const char* name, const V& view, const AttentionShape& shape, std::int64_t last) {
  require(std::int64_t(view.extent(0)) == shape.batch && std::int64_t(view.extent(1)) == shape.heads &&
              std::int64_t(view.extent(2)) == shape.seq && std::int64_t(view.extent(3)) == last,
          "attention: {} must be [{}, {}, {}, {}], got [{}, {}, {}, {}]", name, shape.batch, shape.heads,
          shape.seq, last, view.extent(0), view.extent(1), view.extent(2), view.extent(3));
}

template <class T>
void require_buffers(const AttentionShape& shape, const AttentionStash<T>& stash, const AttentionWork<T>& work) {
  require_positive(shape);
  require_extents("stash.q", stash.q, shape, shape.head_dim);
  require_extents("stash.k", stash.k, shape, shape.head_dim);
  require_extents("stash.v", stash.v, shape, shape.head_dim);
  require_extents("stash.probs", stash.probs, shape, shape.seq);
  require_extents("work.heads_out", work.heads_out, shape, shape.head_dim);
  require_extents("work.dprobs", work.dprobs, shape, shape.seq);
  require_extents("work.dq", work.dq, shape, shape.head_dim);
  require_extents("work.dk", work.dk, shape, shape.head_dim);
  require_extents("work.dv", work.dv, shape, shape.head_dim);
}

// qkv[B*T, 3C] -> q, k, v [B, H, T, hd]
template <class T>
void split_qkv(const ExecSpace& space, const AttentionShape& shape, In2<T> qkv, const View4<T>& q, const View4<T>& k,
               const View4<T>& v) {
  const std::int64_t seq = shape.seq, channels = shape.channels(), head_dim = shape.head_dim;
  const View2<const T> x = qkv;
  Kokkos::parallel_for("kpipe::nn::Attention::forward::split_qkv", range2(space, shape.rows(), 3 * channels),
                       KOKKOS_LAMBDA(std::int64_t row, std::int64_t col) {
                         const std::int64_t b = row / seq, t = row % seq;
                         const std::int64_t part = col / channels, c = col % channels;
                         const std::int64_t h = c / head_dim, d = c % head_dim;
                         const T value = x(row, col);
                         if (part == 0) q(b, h, t, d) = value;
                         else if (part == 1) k(b, h, t, d) = value;
                         else v(b, h, t, d) = value;
                       });
}

// dq, dk, dv [B, H, T, hd] -> dqkv[B*T, 3C]
template <class T>
void merge_qkv(const ExecSpace& space, const AttentionShape& shape, const View4<T>& dq, const View4<T>& dk,
               const View4<T>& dv, const View2<T>& dqkv) {
  const std::int64_t seq = shape.seq, channels = shape.channels(), head_dim = shape.head_dim;
  Kokkos::parallel_for("kpipe::nn::Attention::backward_input::merge_qkv", range2(space, shape.rows(), 3 * channels),
                       KOKKOS_LAMBDA(std::int64_t row, std::int64_t col) {
                         const std::int64_t b = row / seq, t = row % seq;
                         const std::int64_t part = col / channels, c = col % channels;
                         const std::int64_t h = c / head_dim, d = c % head_dim;
                         dqkv(row, col) = part == 0 ? dq(b, h, t, d) : part == 1 ? dk(b, h, t, d) : dv(b, h, t, d);
                       });
}

// heads[B, H, T, hd] -> x[B*T, C], head h in columns h*hd..h*hd+hd-1
template <class T>
void merge_heads(const ExecSpace& space, const AttentionShape& shape, const View4<T>& heads, const View2<T>& x) {
  const std::int64_t seq = shape.seq, head_dim = shape.head_dim;
  Kokkos::parallel_for("kpipe::nn::Attention::forward::merge_heads", range2(space, shape.rows(), shape.channels()),
                       KOKKOS_LAMBDA(std::int64_t row, std::int64_t c) {
                         x(row, c) = heads(row / seq, c / head_dim, row % seq, c % head_dim);
                       });
}

// x[B*T, C] -> heads[B, H, T, hd]
template <class T>
void split_heads(const ExecSpace& space, const AttentionShape& shape, In2<T> x, const View4<T>& heads) {
  const std::int64_t seq = shape.seq, head_dim = shape.head_dim;
  const View2<const T> in = x;
  Kokkos::parallel_for("kpipe::nn::Attention::backward_input::split_heads",
                       range2(space, shape.rows(), shape.channels()), KOKKOS_LAMBDA(std::int64_t row, std::int64_t c) {
                         heads(row / seq, c / head_dim, row % seq, c % head_dim) = in(row, c);
                       });
}

// In place on probs[B, H, T, T]: raw scores q k^T on and below the diagonal in, causal softmax of
// scale * scores out, with exact zeros above the diagonal (whatever was there before). One thread per row,
// three sweeps in a fixed order: max, sum of exponentials, normalize.
template <class T> void causal_softmax(const ExecSpace& space, const View4<T>& probs, T scale) {
  const std::int64_t heads = probs.extent(1), seq = probs.extent(2);
  Kokkos::parallel_for("kpipe::nn::Attention::forward::causal_softmax",
                       range(space, std::int64_t(probs.extent(0)) * heads * seq), KOKKOS_LAMBDA(std::int64_t r) {
                         const std::int64_t b = r / (heads * seq), h = (r / seq) % heads, i = r % seq;
                         T row_max = scale * probs(b, h, i, 0);
                         for (std::int64_t j = 1; j <= i; ++j) row_max = math::max(row_max, scale * probs(b, h, i, j));
                         T sum = 0;
                         for (std::int64_t j = 0; j <= i; ++j) {
                           const T e = math::exp(scale * probs(b, h, i, j) - row_max);
                           probs(b, h, i, j) = e;
                           sum += e;
                         }
                         const T inv_sum = T(1) / sum;  // sum >= 1: the maximum contributes exp(0)
                         for (std::int64_t j = 0; j <= i; ++j) probs(b, h, i, j) *= inv_sum;
                         for (std::int64_t j = i + 1; j < seq; ++j) probs(b, h, i, j) = T(0);
                       });
}

// In place on grad[B, H, T, T]: dL/dprobs on and below the diagonal in, dL/d(q k^T) out,
// grad_ij = scale * P_ij (grad_ij - sum_k grad_ik P_ik), with exact zeros above the diagonal.
template <class T> void causal_softmax_backward(const ExecSpace& space, const View4<T>& probs, const View4<T>& grad, T scale) {
  const std::int64_t heads = probs.extent(1), seq = probs.extent(2);
  Kokkos::parallel_for("kpipe::nn::Attention::backward_input::causal_softmax",
                       range(space, std::int64_t(probs.extent(0)) * heads * seq), KOKKOS_LAMBDA(std::int64_t r) {
                         const std::int64_t b = r / (heads * seq), h = (r / seq) % heads, i = r % seq;
                         T dot = 0;
                         for (std::int64_t j = 0; j <= i; ++j) dot += grad(b, h, i, j) * probs(b, h, i, j);
                         for (std::int64_t j = 0; j <= i; ++j)
                           grad(b, h, i, j) = scale * probs(b, h, i, j) * (grad(b, h, i, j) - dot);
                         for (std::int64_t j = i + 1; j < seq; ++j) grad(b, h, i, j) = T(0);
                       });
}

// The products below only ever read entries on or below the diagonal blocks of probs and dscores, and
// the entries above the diagonal inside a diagonal block are exact zeros (the kernels above write them),
// so skipping the blocks beyond leaves every result unchanged.

// scores[r0:r1, 0:r1] = q[r0:r1] k[0:r1]^T for every row block.
template <class M, class P> void causal_scores(const ExecSpace& space, const M& q, const M& k, const P& scores) {
  using T = typename P::non_const_value_type;
  const std::int64_t seq = scores.extent(0);
  for (std::int64_t r0 = 0; r0 < seq; r0 += causal_block) {
    const std::int64_t r1 = std::min(seq, r0 + causal_block);
    blas::gemm(space, "N", "T", T(1), rows(q, r0, r1), rows(k, 0, r1), T(0), block(scores, r0, r1, 0, r1));
  }
}

// out[r0:r1] = probs[r0:r1, 0:r1] x[0:r1] for every row block (probs lower triangular).
template <class P, class M> void lower_times(const ExecSpace& space, const P& probs, const M& x, const M& out) {
  using T = typename P::non_const_value_type;
  const std::int64_t seq = probs.extent(0);
  for (std::int64_t r0 = 0; r0 < seq; r0 += causal_block) {
    const std::int64_t r1 = std::min(seq, r0 + causal_block);
    blas::gemm(space, "N", "N", T(1), block(probs, r0, r1, 0, r1), rows(x, 0, r1), T(0), rows(out, r0, r1));
  }
}

// out[c0:c1] = probs[c0:T, c0:c1]^T x[c0:T] for every column block (probs lower triangular).
template <class P, class M> void lower_transposed_times(const ExecSpace& space, const P& probs, const M& x, const M& out) {
  using T = typename P::non_const_value_type;
  const std::int64_t seq = probs.extent(0);
  for (std::int64_t c0 = 0; c0 < seq; c0 += causal_block) {
    const std::int64_t c1 = std::min(seq, c0 + causal_block);
    blas::gemm(space, "T", "N", T(1), block(probs, c0, seq, c0, c1), rows(x, c0, seq), T(0), rows(out, c0, c1));
  }
}

}  // namespace attention_detail

template <class T> AttentionStash<T> allocate_stash(const AttentionShape& shape) {
  attention_detail::require_positive(shape);
  const int b = shape.batch, h = shape.heads, t = shape.seq, d = shape.head_dim;
  return {View4<T>(uninitialized("kpipe::nn::Attention::q"), b, h, t, d),
          View4<T>(uninitialized("kpipe::nn::Attention::k"), b, h, t, d),
          View4<T>(uninitialized("kpipe::nn::Attention::v"), b, h, t, d),
          View4<T>(uninitialized("kpipe::nn::Attention::probs"), b, h, t, t)};
}

template <class T> AttentionWork<T> allocate_work(const AttentionShape& shape) {
  attention_detail::require_positive(shape);
  const int b = shape.batch, h = shape.heads, t = shape.seq, d = shape.head_dim;
  return {View4<T>(uninitialized("kpipe::nn::Attention::heads_out"), b, h, t, d),
          View4<T>(uninitialized("kpipe::nn::Attention::dprobs"), b, h, t, t),
          View4<T>(uninitialized("kpipe::nn::Attention::dq"), b, h, t, d),
          View4<T>(uninitialized("kpipe::nn::Attention::dk"), b, h, t, d),
          View4<T>(uninitialized("kpipe::nn::Attention::dv"), b, h, t, d)};
}

template <class T>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, In2<T> qkv, const AttentionStash<T>& stash,
                       const AttentionWork<T>& work, const View2<T>& out) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("qkv", qkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  require_extents("out", out, shape.rows(), shape.channels());

  split_qkv(space, shape, qkv, stash.q, stash.k, stash.v);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      causal_scores(space, head(stash.q, b, h), head(stash.k, b, h), head(stash.probs, b, h));
  causal_softmax(space, stash.probs, T(1) / math::sqrt(T(shape.head_dim)));
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      lower_times(space, head(stash.probs, b, h), head(stash.v, b, h), head(work.heads_out, b, h));
  merge_heads(space, shape, work.heads_out, out);
}

template <class T>
void attention_backward_input(const ExecSpace& space, const AttentionShape& shape, const AttentionStash<T>& stash,
                              const AttentionWork<T>& work, In2<T> dout, const View2<T>& dqkv) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("dout", dout, shape.rows(), shape.channels());
  require_extents("dqkv", dqkv, shape.rows(), 3 * std::int64_t(shape.channels()));

  const auto& dheads = work.heads_out;  // dL/d(heads_out), by head
  split_heads(space, shape, dout, dheads);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h) {
      const auto dprobs = head(work.dprobs, b, h);
      causal_scores(space, head(dheads, b, h), head(stash.v, b, h), dprobs);  // dP = dO v^T
      lower_transposed_times(space, head(stash.probs, b, h), head(dheads, b, h), head(work.dv, b, h));  // dv = P^T dO
    }
  const auto& dscores = work.dprobs;  // overwritten in place: dL/d(q k^T) from here on
  causal_softmax_backward(space, stash.probs, dscores, T(1) / math::sqrt(T(shape.head_dim)));
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h) {
      lower_times(space, head(dscores, b, h), head(stash.k, b, h), head(work.dq, b, h));                 // dq = dS k
      lower_transposed_times(space, head(dscores, b, h), head(stash.q, b, h), head(work.dk, b, h));      // dk = dS^T q
    }
  merge_qkv(space, shape, work.dq, work.dk, work.dv, dqkv);
}

double attention_forward_flops(const AttentionShape& shape) {
  const double heads = double(shape.batch) * shape.heads;
  return heads * (blas::gemm_flops(shape.seq, shape.seq, shape.head_dim) +
                  blas::gemm_flops(shape.seq, shape.head_dim, shape.seq));
}

template AttentionStash<float> allocate_stash<float>(const AttentionShape&);
template AttentionWork<float> allocate_work<float>(const AttentionShape&);
template void attention_forward(const ExecSpace&, const AttentionShape&, In2<float>, const AttentionStash<float>&,
                                const AttentionWork<float>&, const View2<float>&);
template void attention_backward_input(const ExecSpace&, const AttentionShape&, const AttentionStash<float>&,
                                       const AttentionWork<float>&, In2<float>, const View2<float>&);
template AttentionStash<double> allocate_stash<double>(const AttentionShape&);
template AttentionWork<double> allocate_work<double>(const AttentionShape&);
template void attention_forward(const ExecSpace&, const AttentionShape&, In2<double>, const AttentionStash<double>&,
                                const AttentionWork<double>&, const View2<double>&);
template void attention_backward_input(const ExecSpace&, const AttentionShape&, const AttentionStash<double>&,
                                       const AttentionWork<double>&, In2<double>, const View2<double>&);

}  // namespace kpipe::nn
