#include "kpipe/nn/attention.hpp"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "kpipe/core/blas.hpp"
#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/nn/strided_max.hpp"

namespace kpipe::nn {

// Helpers for the attention kernels. A named namespace, not an anonymous one: kernels may not be
// lambdas in anonymous namespaces (CUDA).
namespace attention_detail {

// The causal T x T products are computed in blocks of this many query rows (or key columns): a block
// of rows r0..r1-1 only needs keys 0..r1-1, so the products skip most of the masked upper triangle
// (about (n+1)/2n of the full work with n blocks) at the price of n calls per head instead of one.
constexpr int causal_block = 64;
static_assert(causal_block % simd_lanes == 0, "the softmax sweeps whole vectors inside a causal block");

// Row i of a causal T x T block holds n = i + 1 live entries; the host softmax sweeps run over whole vectors,
// up to the next multiple of simd_lanes (or the row's end), which causal_scores has filled.
KOKKOS_INLINE_FUNCTION std::int64_t whole_vectors(std::int64_t n, std::int64_t seq) {
  return math::min<std::int64_t>(seq, (n + simd_lanes - 1) / simd_lanes * simd_lanes);
}

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
// Sequence b's columns c0..c0+width-1 of a [B*T, x] activation, e.g. one head's slice of out or dqkv:
// gemm reads and writes them in place (leading dimension x), with no copy into a per-head layout.
template <class M> auto sequence_columns(const M& m, const AttentionShape& shape, int b, std::int64_t c0, int width) {
  const std::int64_t r0 = std::int64_t(b) * shape.seq;
  return block(m, r0, r0 + shape.seq, c0, c0 + width);
}
static_assert(std::is_same_v<typename decltype(head(View4<float>(), 0, 0))::array_layout, Kokkos::LayoutRight>,
              "a head of a LayoutRight [B, H, T, x] view must be LayoutRight for the BLAS path");
static_assert(std::is_same_v<typename decltype(block(head(View4<float>(), 0, 0), 0, 1, 0, 1))::array_layout,
                             Kokkos::LayoutRight>,
              "a block of a head must stay LayoutRight for the BLAS path");
static_assert(std::is_same_v<typename decltype(block(View2<const float>(), 0, 1, 0, 1))::array_layout,
                             Kokkos::LayoutRight>,
              "a block of an activation must stay LayoutRight for the BLAS path");

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
  require_extents("stash.qkv", stash.qkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  require_extents("stash.probs", stash.probs, shape, shape.seq);
  require_extents("work.dprobs", work.dprobs, shape, shape.seq);
}

using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;

// Head h of sequence b of part 0 (q), 1 (k) or 2 (v) of a [B*T, 3C] q | k | v activation, as a [T, hd]
// LayoutRight matrix with leading dimension 3C: gemm reads it where the projection wrote it.
template <class M> auto qkv_head(const M& qkv, const AttentionShape& shape, int part, int b, int h) {
  return sequence_columns(qkv, shape, b, std::int64_t(part) * shape.channels() + std::int64_t(h) * shape.head_dim,
                          shape.head_dim);
}

// ---- Host path: per-head products through the vendor BLAS, softmax one thread per row ----

// In place on probs[B, H, T, T]: raw scores q k^T on and below the diagonal in, causal softmax of
// scale * scores out, with exact zeros above the diagonal (whatever was there before). One thread per row,
// three sweeps (max, sum of exponentials, normalize), each a vectorized loop over the row's first i + 1
// entries.
template <class T> void causal_softmax(const ExecSpace& space, const View4<T>& probs, T scale) {
  const int seq = probs.extent(2);
  T* const base = probs.data();
  Kokkos::parallel_for(
      "kpipe::nn::Attention::forward::causal_softmax",
      range(space, std::int64_t(probs.extent(0)) * probs.extent(1) * seq), KOKKOS_LAMBDA(std::int64_t r) {
        T* KOKKOS_RESTRICT p = base + r * seq;
        const std::int64_t n = r % seq + 1;
        // Whole vectors up to `padded`: masked lanes count as nothing, and the exponential sweep writes
        // them the zeros they get anyway.
        const std::int64_t padded = whole_vectors(n, seq);
        // max(scale * x) = scale * max(x), scale > 0
        const T row_max = lane_max<T>(padded, [&](std::int64_t j) { return j < n ? p[j] : p[0]; }) * scale;
        const T sum = lane_sum<T>(padded, [&](std::int64_t j) {
          const T e = j < n ? math::fast_exp(scale * p[j] - row_max) : T(0);
          p[j] = e;
          return e;
        });
        const T inv_sum = T(1) / sum;  // sum >= 1: the maximum contributes exp(0)
        for (std::int64_t j = 0; j < padded; ++j) p[j] *= inv_sum;
        for (std::int64_t j = padded; j < seq; ++j) p[j] = T(0);
      });
}

// In place on grad[B, H, T, T]: dL/dprobs on and below the diagonal in, dL/d(q k^T) out,
// grad_ij = scale * P_ij (grad_ij - sum_k grad_ik P_ik), with exact zeros above the diagonal.
template <class T>
void causal_softmax_backward(const ExecSpace& space, const View4<T>& probs, const View4<T>& grad, T scale) {
  const int seq = probs.extent(2);
  const T* const probs_base = probs.data();
  T* const grad_base = grad.data();
  Kokkos::parallel_for(
      "kpipe::nn::Attention::backward_input::causal_softmax",
      range(space, std::int64_t(probs.extent(0)) * probs.extent(1) * seq), KOKKOS_LAMBDA(std::int64_t r) {
        const T* KOKKOS_RESTRICT p = probs_base + r * seq;
        T* KOKKOS_RESTRICT g = grad_base + r * seq;
        // probs are exact zeros in [n, padded) (the forward wrote them), so whole vectors up to padded
        // add nothing to the dot product and give zeros there.
        const std::int64_t n = r % seq + 1;
        const std::int64_t padded = whole_vectors(n, seq);
        const T dot = lane_sum<T>(padded, [&](std::int64_t j) { return j < n ? g[j] * p[j] : T(0); });
        for (std::int64_t j = 0; j < padded; ++j) g[j] = j < n ? scale * p[j] * (g[j] - dot) : T(0);
        for (std::int64_t j = padded; j < seq; ++j) g[j] = T(0);
      });
}

// The products below only ever read entries on or below the diagonal blocks of probs and dscores, and
// the entries above the diagonal inside a diagonal block are exact zeros (the kernels above write them),
// so skipping the blocks beyond leaves every result unchanged.

// scores[r0:r1, 0:r1] = q[r0:r1] k[0:r1]^T for every row block.
template <class Q, class K, class P> void causal_scores(const ExecSpace& space, const Q& q, const K& k, const P& scores) {
  using T = typename P::non_const_value_type;
  const std::int64_t seq = scores.extent(0);
  for (std::int64_t r0 = 0; r0 < seq; r0 += causal_block) {
    const std::int64_t r1 = std::min(seq, r0 + causal_block);
    blas::gemm(space, "N", "T", T(1), rows(q, r0, r1), rows(k, 0, r1), T(0), block(scores, r0, r1, 0, r1));
  }
}

// out[r0:r1] = probs[r0:r1, 0:r1] x[0:r1] for every row block (probs lower triangular).
template <class P, class X, class O> void lower_times(const ExecSpace& space, const P& probs, const X& x, const O& out) {
  using T = typename P::non_const_value_type;
  const std::int64_t seq = probs.extent(0);
  for (std::int64_t r0 = 0; r0 < seq; r0 += causal_block) {
    const std::int64_t r1 = std::min(seq, r0 + causal_block);
    blas::gemm(space, "N", "N", T(1), block(probs, r0, r1, 0, r1), rows(x, 0, r1), T(0), rows(out, r0, r1));
  }
}

// out[c0:c1] = probs[c0:T, c0:c1]^T x[c0:T] for every column block (probs lower triangular).
template <class P, class X, class O>
void lower_transposed_times(const ExecSpace& space, const P& probs, const X& x, const O& out) {
  using T = typename P::non_const_value_type;
  const std::int64_t seq = probs.extent(0);
  for (std::int64_t c0 = 0; c0 < seq; c0 += causal_block) {
    const std::int64_t c1 = std::min(seq, c0 + causal_block);
    blas::gemm(space, "T", "N", T(1), block(probs, c0, seq, c0, c1), rows(x, c0, seq), T(0), rows(out, c0, c1));
  }
}

// ---- Device path: a few batched kernels instead of B * H * (T / causal_block) products per pass ----
//
// A GPU would spend a micro-batch's attention launching thousands of small gemms from a host loop. Here each
// pass is one launch over every (sequence, head, row):
//   forward:   a team per query row i:  scores q_i . k_j for j <= i, causal softmax in place, out_i = P_i V;
//   backward:  a team per query row i:  dP_ij = dO_i . v_j, dS_i = softmax backward, dq_i = dS_i K;
//              a team per key row j:    dv_j = sum_{i >= j} P_ij dO_i, dk_j = sum_{i >= j} dS_ij q_i.
// The causal mask is the loop bound, so nothing above the diagonal is computed. Every output element is one
// thread's sum over a fixed range in a fixed order, and every team reduction combines lanes in a fixed
// order: the same inputs give the same bits on every run. (Each team reads its keys from global memory
// through the cache; a tiled kernel that stages blocks of K and V in team scratch is the next step once it
// can be measured on a GPU.)

// Row r of the [B, H, T, T] tensors: sequence b, head h, query (or key) position i.
struct HeadRow {
  int b, h, i;
  KOKKOS_INLINE_FUNCTION HeadRow(std::int64_t r, int heads, int seq)
      : b(int(r / (std::int64_t(heads) * seq))), h(int((r / seq) % heads)), i(int(r % seq)) {}
};

// In place on row p[0, seq) of query i: raw scores on and below the diagonal in, the causal softmax of
// scale * scores out, exact zeros above the diagonal. Each thread sweeps a strided share j = lane,
// lane + lanes, ... of the row in a register of its own (coalesced), then the team combines the shares.
template <class T> KOKKOS_INLINE_FUNCTION void team_causal_softmax(const Team& team, T* p, int i, int seq, T scale) {
  const int lanes = team.team_size();
  T row_max = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, lanes),
      [&](int lane, T& team_max) {
        // max(scale * x) = scale * max(x) exactly, scale being positive.
        if (lane <= i) team_max = math::max(team_max, strided_max(p, lane, i, lanes) * scale);
      },
      Kokkos::Max<T>(row_max));
  T sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, lanes),
      [&](int lane, T& team_sum) {
        T s = 0;
        for (int j = lane; j <= i; j += lanes) {
          const T e = math::exp(scale * p[j] - row_max);
          p[j] = e;
          s += e;
        }
        team_sum += s;
      },
      sum);
  const T inv_sum = T(1) / sum;  // sum >= 1: the maximum contributes exp(0)
  team.team_barrier();           // the next sweep splits the row among the threads differently
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, seq), [&](int j) { p[j] = j <= i ? p[j] * inv_sum : T(0); });
}

// qkv[B*T, 3C] -> probs[B, H, T, T] (the stash), out[B*T, C]
template <class T>
void forward_rows(const ExecSpace& space, const AttentionShape& shape, const View2<const T>& qkv,
                  const View4<T>& probs, const View2<T>& out) {
  const int heads = shape.heads, seq = shape.seq, hd = shape.head_dim;
  const std::int64_t channels = shape.channels();
  const T scale = T(1) / math::sqrt(T(hd));
  for_each_team(
      "kpipe::nn::Attention::forward::rows", space, std::int64_t(shape.batch) * heads * seq,
      KOKKOS_LAMBDA(const Team& team) {
        const HeadRow r(team.league_rank(), heads, seq);
        const std::int64_t row0 = std::int64_t(r.b) * seq;  // sequence b's first row of qkv and out
        const std::int64_t q0 = std::int64_t(r.h) * hd, k0 = channels + q0, v0 = 2 * channels + q0;
        const T* const q = &qkv(row0 + r.i, q0);
        T* const p = &probs(r.b, r.h, r.i, 0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r.i + 1), [&](int j) {
          const T* const k = &qkv(row0 + j, k0);
          T s = 0;
          for (int d = 0; d < hd; ++d) s += q[d] * k[d];
          p[j] = s;
        });
        team.team_barrier();
        team_causal_softmax(team, p, r.i, seq, scale);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](int d) {
          T s = 0;
          for (int j = 0; j <= r.i; ++j) s += p[j] * qkv(row0 + j, v0 + d);
          out(row0 + r.i, q0 + d) = s;
        });
      });
}

// (qkv, probs, dout[B*T, C]) -> dscores[B, H, T, T] = dL/d(q k^T), dqkv[B*T, 3C]
template <class T>
void backward_rows(const ExecSpace& space, const AttentionShape& shape, const View2<const T>& qkv,
                   const View4<const T>& probs, const View2<const T>& dout, const View4<T>& dscores,
                   const View2<T>& dqkv) {
  const int heads = shape.heads, seq = shape.seq, hd = shape.head_dim;
  const std::int64_t channels = shape.channels();
  const T scale = T(1) / math::sqrt(T(hd));
  const std::int64_t rows = std::int64_t(shape.batch) * heads * seq;
  // Query rows: dP_i = dO_i V^T, then dS_i (softmax backward, in place), then dq_i = dS_i K.
  for_each_team(
      "kpipe::nn::Attention::backward_input::rows", space, rows, KOKKOS_LAMBDA(const Team& team) {
        const HeadRow r(team.league_rank(), heads, seq);
        const std::int64_t row0 = std::int64_t(r.b) * seq;
        const std::int64_t q0 = std::int64_t(r.h) * hd, k0 = channels + q0, v0 = 2 * channels + q0;
        const T* const dy = &dout(row0 + r.i, q0);
        const T* const p = &probs(r.b, r.h, r.i, 0);
        T* const g = &dscores(r.b, r.h, r.i, 0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r.i + 1), [&](int j) {
          const T* const v = &qkv(row0 + j, v0);
          T s = 0;
          for (int d = 0; d < hd; ++d) s += dy[d] * v[d];
          g[j] = s;
        });
        team.team_barrier();
        const int lanes = team.team_size();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, lanes),
            [&](int lane, T& team_dot) {
              T s = 0;
              for (int j = lane; j <= r.i; j += lanes) s += g[j] * p[j];
              team_dot += s;
            },
            dot);
        team.team_barrier();  // every read of g before the first write
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, seq),
                             [&](int j) { g[j] = j <= r.i ? scale * p[j] * (g[j] - dot) : T(0); });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](int d) {
          T s = 0;
          for (int j = 0; j <= r.i; ++j) s += g[j] * qkv(row0 + j, k0 + d);
          dqkv(row0 + r.i, q0 + d) = s;
        });
      });
  // Key rows, once every dS is complete (the next launch on the same space): dv_j = P[:, j]^T dO and
  // dk_j = dS[:, j]^T Q over the query rows i >= j.
  const View4<const T> ds = dscores;
  for_each_team(
      "kpipe::nn::Attention::backward_input::columns", space, rows, KOKKOS_LAMBDA(const Team& team) {
        const HeadRow r(team.league_rank(), heads, seq);  // r.i is the key position here
        const std::int64_t row0 = std::int64_t(r.b) * seq;
        const std::int64_t q0 = std::int64_t(r.h) * hd, k0 = channels + q0, v0 = 2 * channels + q0;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](int d) {
          T dv = 0, dk = 0;
          for (int i = r.i; i < seq; ++i) {
            dv += probs(r.b, r.h, i, r.i) * dout(row0 + i, q0 + d);
            dk += ds(r.b, r.h, i, r.i) * qkv(row0 + i, q0 + d);
          }
          dqkv(row0 + r.i, v0 + d) = dv;
          dqkv(row0 + r.i, k0 + d) = dk;
        });
      });
}

}  // namespace attention_detail

template <class T> AttentionStash<T> allocate_stash(const AttentionShape& shape, bool qkv, bool probs) {
  attention_detail::require_positive(shape);
  const int b = shape.batch, h = shape.heads, t = shape.seq, d = shape.head_dim;
  AttentionStash<T> stash;
  if (qkv) stash.qkv = View2<T>(uninitialized("kpipe::nn::Attention::qkv"), shape.rows(), 3 * std::int64_t(h) * d);
  if (probs) stash.probs = View4<T>(uninitialized("kpipe::nn::Attention::probs"), b, h, t, t);
  return stash;
}

template <class T> AttentionWork<T> allocate_work(const AttentionShape& shape) {
  attention_detail::require_positive(shape);
  AttentionWork<T> work;
  work.dprobs = View4<T>(uninitialized("kpipe::nn::Attention::dprobs"), shape.batch, shape.heads, shape.seq, shape.seq);
  return work;
}

template <class T, KernelPath P>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, In2<T> qkv, const AttentionStash<T>& stash,
                       const AttentionWork<T>& work, const View2<T>& out) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("qkv", qkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  require_extents("out", out, shape.rows(), shape.channels());

  const int hd = shape.head_dim;
  if (qkv.data() != stash.qkv.data()) Kokkos::deep_copy(space, stash.qkv, qkv);
  const View2<const T> x = stash.qkv;
  if constexpr (P == KernelPath::device) {
    forward_rows(space, shape, x, stash.probs, out);
  } else {  // host path: per-head products through the host BLAS
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h)
        causal_scores(space, qkv_head(x, shape, 0, b, h), qkv_head(x, shape, 1, b, h), head(stash.probs, b, h));
    causal_softmax(space, stash.probs, T(1) / math::sqrt(T(hd)));
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h)  // head h's output straight into its columns of out
        lower_times(space, head(stash.probs, b, h), qkv_head(x, shape, 2, b, h),
                    sequence_columns(out, shape, b, h * hd, hd));
  }
}

template <class T, KernelPath P>
void attention_backward_input(const ExecSpace& space, const AttentionShape& shape, const AttentionStash<T>& stash,
                              const AttentionWork<T>& work, In2<T> dout, const View2<T>& dqkv) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("dout", dout, shape.rows(), shape.channels());
  require_extents("dqkv", dqkv, shape.rows(), 3 * std::int64_t(shape.channels()));

  const int hd = shape.head_dim;
  const std::int64_t channels = shape.channels();
  const View2<const T> dy = dout;
  const View2<const T> x = stash.qkv;
  if constexpr (P == KernelPath::device) {
    backward_rows(space, shape, x, View4<const T>(stash.probs), dy, work.dprobs, dqkv);
  } else {  // host path: per-head products through the host BLAS
    // dO of head h is its columns of dout; dq, dk, dv of head h go straight into their columns of dqkv.
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h) {
        const auto dheads = sequence_columns(dy, shape, b, h * hd, hd);
        causal_scores(space, dheads, qkv_head(x, shape, 2, b, h), head(work.dprobs, b, h));  // dP = dO v^T
        lower_transposed_times(space, head(stash.probs, b, h), dheads,
                               sequence_columns(dqkv, shape, b, 2 * channels + h * hd, hd));  // dv = P^T dO
      }
    const auto& dscores = work.dprobs;  // overwritten in place: dL/d(q k^T) from here on
    causal_softmax_backward(space, stash.probs, dscores, T(1) / math::sqrt(T(hd)));
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h) {
        lower_times(space, head(dscores, b, h), qkv_head(x, shape, 1, b, h),
                    sequence_columns(dqkv, shape, b, h * hd, hd));  // dq = dS k
        lower_transposed_times(space, head(dscores, b, h), qkv_head(x, shape, 0, b, h),
                               sequence_columns(dqkv, shape, b, channels + h * hd, hd));  // dk = dS^T q
      }
  }
}

double attention_forward_flops(const AttentionShape& shape) {
  const double heads = double(shape.batch) * shape.heads;
  return heads * (blas::gemm_flops(shape.seq, shape.seq, shape.head_dim) +
                  blas::gemm_flops(shape.seq, shape.head_dim, shape.seq));
}

template AttentionStash<float> allocate_stash<float>(const AttentionShape&, bool, bool);
template AttentionWork<float> allocate_work<float>(const AttentionShape&);
template void attention_forward<float, KernelPath::host>(const ExecSpace&, const AttentionShape&, In2<float>,
                                                     const AttentionStash<float>&, const AttentionWork<float>&,
                                                     const View2<float>&);
template void attention_backward_input<float, KernelPath::host>(const ExecSpace&, const AttentionShape&,
                                                            const AttentionStash<float>&, const AttentionWork<float>&,
                                                            In2<float>, const View2<float>&);
template void attention_forward<float, KernelPath::device>(const ExecSpace&, const AttentionShape&, In2<float>,
                                                     const AttentionStash<float>&, const AttentionWork<float>&,
                                                     const View2<float>&);
template void attention_backward_input<float, KernelPath::device>(const ExecSpace&, const AttentionShape&,
                                                            const AttentionStash<float>&, const AttentionWork<float>&,
                                                            In2<float>, const View2<float>&);
template AttentionStash<double> allocate_stash<double>(const AttentionShape&, bool, bool);
template AttentionWork<double> allocate_work<double>(const AttentionShape&);
template void attention_forward<double, KernelPath::host>(const ExecSpace&, const AttentionShape&, In2<double>,
                                                     const AttentionStash<double>&, const AttentionWork<double>&,
                                                     const View2<double>&);
template void attention_backward_input<double, KernelPath::host>(const ExecSpace&, const AttentionShape&,
                                                            const AttentionStash<double>&, const AttentionWork<double>&,
                                                            In2<double>, const View2<double>&);
template void attention_forward<double, KernelPath::device>(const ExecSpace&, const AttentionShape&, In2<double>,
                                                     const AttentionStash<double>&, const AttentionWork<double>&,
                                                     const View2<double>&);
template void attention_backward_input<double, KernelPath::device>(const ExecSpace&, const AttentionShape&,
                                                            const AttentionStash<double>&, const AttentionWork<double>&,
                                                            In2<double>, const View2<double>&);

}  // namespace kpipe::nn
