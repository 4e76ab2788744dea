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

template <class T, class A>
void require_buffers(const AttentionShape& shape, const AttentionStash<A>& stash, const AttentionWork<T, A>& work) {
  require_positive(shape);
  require_extents("stash.qkv", stash.qkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  require_extents("stash.probs", stash.probs, shape, shape.seq);
  require_extents("work.dprobs", work.dprobs, shape, shape.seq);
  if constexpr (mixed_precision<T, A>) require_extents("work.dscores", work.dscores, shape, shape.seq);
}

// Where forward's raw scores go: into the probabilities, softmaxed in place, when A is T; into the T buffer
// otherwise (the softmax reads them in T and writes the probabilities rounded to A).
template <class T, class A> View4<T> scores_of(const AttentionStash<A>& stash, const AttentionWork<T, A>& work) {
  if constexpr (mixed_precision<T, A>) {
    return work.dprobs;
  } else {
    return stash.probs;
  }
}

// Where dL/d(q k^T) goes: over dL/dprobs in place when A is T; into the A buffer otherwise.
template <class T, class A> View4<A> dscores_of(const AttentionWork<T, A>& work) {
  if constexpr (mixed_precision<T, A>) {
    return work.dscores;
  } else {
    return work.dprobs;
  }
}

using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;

// Head h of sequence b of part 0 (q), 1 (k) or 2 (v) of a [B*T, 3C] q | k | v activation, as a [T, hd]
// LayoutRight matrix with leading dimension 3C: gemm reads it where the projection wrote it.
template <class M> auto qkv_head(const M& qkv, const AttentionShape& shape, int part, int b, int h) {
  return sequence_columns(qkv, shape, b, std::int64_t(part) * shape.channels() + std::int64_t(h) * shape.head_dim,
                          shape.head_dim);
}

// ---- Host path: per-head products through the vendor BLAS, softmax one thread per row ----

// scores[B, H, T, T] -> probs[B, H, T, T]: raw scores q k^T on and below the diagonal in, causal softmax of
// scale * scores out, with exact zeros above the diagonal (whatever was there before). When A is T, scores
// and probs are the same buffer (in place); otherwise the exponentials overwrite the scores and the
// probabilities are rounded to A once. One thread per row, three sweeps (max, sum of exponentials,
// normalize), each a vectorized loop over the row's first i + 1 entries.
template <class T, class A>
void causal_softmax(const ExecSpace& space, const View4<T>& scores, const View4<A>& probs, T scale) {
  const int seq = probs.extent(2);
  T* const base = scores.data();
  A* const probs_base = probs.data();
  Kokkos::parallel_for(
      "kpipe::nn::Attention::forward::causal_softmax",
      range(space, std::int64_t(probs.extent(0)) * probs.extent(1) * seq), KOKKOS_LAMBDA(std::int64_t r) {
        T* KOKKOS_RESTRICT p = base + r * seq;
        // Captured here, not first inside the if constexpr below (which CUDA's extended lambdas refuse).
        A* const row_probs = probs_base + r * seq;  // p itself when A is T
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
        if constexpr (mixed_precision<T, A>) {
          A* KOKKOS_RESTRICT out = row_probs;
          for (std::int64_t j = 0; j < padded; ++j) out[j] = narrow<A>(p[j] * inv_sum);
          for (std::int64_t j = padded; j < seq; ++j) out[j] = narrow<A>(T(0));
        } else {
          (void)row_probs;  // the same buffer as p
          for (std::int64_t j = 0; j < padded; ++j) p[j] *= inv_sum;
          for (std::int64_t j = padded; j < seq; ++j) p[j] = T(0);
        }
      });
}

// (probs, grad = dL/dprobs)[B, H, T, T] -> dscores = dL/d(q k^T), on and below the diagonal
// scale * P_ij (grad_ij - sum_k grad_ik P_ik), with exact zeros above it. When A is T, dscores is grad (in
// place); otherwise the result, computed in T, is rounded to A once.
template <class T, class A>
void causal_softmax_backward(const ExecSpace& space, const View4<A>& probs, const View4<T>& grad,
                             const View4<A>& dscores, T scale) {
  const int seq = probs.extent(2);
  const A* const probs_base = probs.data();
  T* const grad_base = grad.data();
  A* const dscores_base = dscores.data();
  Kokkos::parallel_for(
      "kpipe::nn::Attention::backward_input::causal_softmax",
      range(space, std::int64_t(probs.extent(0)) * probs.extent(1) * seq), KOKKOS_LAMBDA(std::int64_t r) {
        const A* KOKKOS_RESTRICT p = probs_base + r * seq;
        T* KOKKOS_RESTRICT g = grad_base + r * seq;
        // Captured here, not first inside the if constexpr below (which CUDA's extended lambdas refuse).
        A* const row_dscores = dscores_base + r * seq;  // g itself when A is T
        const T s = scale;
        // probs are exact zeros in [n, padded) (the forward wrote them), so whole vectors up to padded
        // add nothing to the dot product and give zeros there.
        const std::int64_t n = r % seq + 1;
        const std::int64_t padded = whole_vectors(n, seq);
        const T dot = lane_sum<T>(padded, [&](std::int64_t j) { return j < n ? g[j] * widen<T>(p[j]) : T(0); });
        if constexpr (mixed_precision<T, A>) {
          A* KOKKOS_RESTRICT ds = row_dscores;
          for (std::int64_t j = 0; j < padded; ++j)
            ds[j] = narrow<A>(j < n ? s * widen<T>(p[j]) * (g[j] - dot) : T(0));
          for (std::int64_t j = padded; j < seq; ++j) ds[j] = narrow<A>(T(0));
        } else {
          (void)row_dscores;  // the same buffer as g
          for (std::int64_t j = 0; j < padded; ++j) g[j] = j < n ? s * p[j] * (g[j] - dot) : T(0);
          for (std::int64_t j = padded; j < seq; ++j) g[j] = T(0);
        }
      });
}

// The products below only ever read entries on or below the diagonal blocks of probs and dscores, and
// the entries above the diagonal inside a diagonal block are exact zeros (the kernels above write them),
// so skipping the blocks beyond leaves every result unchanged.

// The products' alpha and beta for an output holding M's elements.
template <class M> using scalar_of = blas::scalar_t<typename M::non_const_value_type>;

// scores[r0:r1, 0:r1] = q[r0:r1] k[0:r1]^T for every row block.
template <class Q, class K, class P>
void causal_scores(const ExecSpace& space, const Q& q, const K& k, const P& scores, const View1<float>& workspace) {
  using S = scalar_of<P>;
  const std::int64_t seq = scores.extent(0);
  for (std::int64_t r0 = 0; r0 < seq; r0 += causal_block) {
    const std::int64_t r1 = std::min(seq, r0 + causal_block);
    blas::gemm(space, "N", "T", S(1), rows(q, r0, r1), rows(k, 0, r1), S(0), block(scores, r0, r1, 0, r1),
               blas::Math::exact, workspace);
  }
}

// out[r0:r1] = probs[r0:r1, 0:r1] x[0:r1] for every row block (probs lower triangular).
template <class P, class X, class O>
void lower_times(const ExecSpace& space, const P& probs, const X& x, const O& out, const View1<float>& workspace) {
  using S = scalar_of<O>;
  const std::int64_t seq = probs.extent(0);
  for (std::int64_t r0 = 0; r0 < seq; r0 += causal_block) {
    const std::int64_t r1 = std::min(seq, r0 + causal_block);
    blas::gemm(space, "N", "N", S(1), block(probs, r0, r1, 0, r1), rows(x, 0, r1), S(0), rows(out, r0, r1),
               blas::Math::exact, workspace);
  }
}

// out[c0:c1] = probs[c0:T, c0:c1]^T x[c0:T] for every column block (probs lower triangular).
template <class P, class X, class O>
void lower_transposed_times(const ExecSpace& space, const P& probs, const X& x, const O& out,
                            const View1<float>& workspace) {
  using S = scalar_of<O>;
  const std::int64_t seq = probs.extent(0);
  for (std::int64_t c0 = 0; c0 < seq; c0 += causal_block) {
    const std::int64_t c1 = std::min(seq, c0 + causal_block);
    blas::gemm(space, "T", "N", S(1), block(probs, c0, seq, c0, c1), rows(x, c0, seq), S(0), rows(out, c0, c1),
               blas::Math::exact, workspace);
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

// Row s[0, seq) of query i's raw scores on and below the diagonal -> row p[0, seq) of its causal softmax of
// scale * scores, exact zeros above the diagonal; the exponentials overwrite s. When A is T, p is s (in
// place); otherwise each probability is rounded to A once. Each thread sweeps a strided share j = lane,
// lane + lanes, ... of the row in a register of its own (coalesced), then the team combines the shares.
template <class T, class A>
KOKKOS_INLINE_FUNCTION void team_causal_softmax(const Team& team, T* s, A* p, int i, int seq, T scale) {
  const int lanes = team.team_size();
  T row_max = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, lanes),
      [&](int lane, T& team_max) {
        // max(scale * x) = scale * max(x) exactly, scale being positive.
        if (lane <= i) team_max = math::max(team_max, strided_max(s, lane, i, lanes) * scale);
      },
      Kokkos::Max<T>(row_max));
  T sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, lanes),
      [&](int lane, T& team_sum) {
        T partial = 0;
        for (int j = lane; j <= i; j += lanes) {
          const T e = math::exp(scale * s[j] - row_max);
          s[j] = e;
          partial += e;
        }
        team_sum += partial;
      },
      sum);
  const T inv_sum = T(1) / sum;  // sum >= 1: the maximum contributes exp(0)
  team.team_barrier();           // the next sweep splits the row among the threads differently
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, seq),
                       [&](int j) { p[j] = j <= i ? narrow<A>(s[j] * inv_sum) : narrow<A>(T(0)); });
}

// qkv[B*T, 3C] -> probs[B, H, T, T] (the stash), out[B*T, C]; the raw scores go through `scores` (probs
// itself when A is T).
template <class T, class A>
void forward_rows(const ExecSpace& space, const AttentionShape& shape, const View2<const A>& qkv,
                  const View4<T>& scores, const View4<A>& probs, const View2<A>& out) {
  const int heads = shape.heads, seq = shape.seq, hd = shape.head_dim;
  const std::int64_t channels = shape.channels();
  const T scale = T(1) / math::sqrt(T(hd));
  for_each_team(
      "kpipe::nn::Attention::forward::rows", space, std::int64_t(shape.batch) * heads * seq,
      KOKKOS_LAMBDA(const Team& team) {
        const HeadRow r(team.league_rank(), heads, seq);
        const std::int64_t row0 = std::int64_t(r.b) * seq;  // sequence b's first row of qkv and out
        const std::int64_t q0 = std::int64_t(r.h) * hd, k0 = channels + q0, v0 = 2 * channels + q0;
        const A* const q = &qkv(row0 + r.i, q0);
        T* const s = &scores(r.b, r.h, r.i, 0);
        A* const p = &probs(r.b, r.h, r.i, 0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r.i + 1), [&](int j) {
          const A* const k = &qkv(row0 + j, k0);
          T dot = 0;
          for (int d = 0; d < hd; ++d) dot += widen<T>(q[d]) * widen<T>(k[d]);
          s[j] = dot;
        });
        team.team_barrier();
        team_causal_softmax(team, s, p, r.i, seq, scale);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](int d) {
          T sum = 0;
          for (int j = 0; j <= r.i; ++j) sum += widen<T>(p[j]) * widen<T>(qkv(row0 + j, v0 + d));
          out(row0 + r.i, q0 + d) = narrow<A>(sum);
        });
      });
}

// (qkv, probs, dout[B*T, C]) -> dprobs[B, H, T, T] = dL/dprobs, dscores[B, H, T, T] = dL/d(q k^T) (dprobs
// itself when A is T), dqkv[B*T, 3C]
template <class T, class A>
void backward_rows(const ExecSpace& space, const AttentionShape& shape, const View2<const A>& qkv,
                   const View4<const A>& probs, const View2<const A>& dout, const View4<T>& dprobs,
                   const View4<A>& dscores, const View2<A>& dqkv) {
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
        const A* const dy = &dout(row0 + r.i, q0);
        const A* const p = &probs(r.b, r.h, r.i, 0);
        T* const g = &dprobs(r.b, r.h, r.i, 0);
        A* const ds = &dscores(r.b, r.h, r.i, 0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r.i + 1), [&](int j) {
          const A* const v = &qkv(row0 + j, v0);
          T s = 0;
          for (int d = 0; d < hd; ++d) s += widen<T>(dy[d]) * widen<T>(v[d]);
          g[j] = s;
        });
        team.team_barrier();
        const int lanes = team.team_size();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, lanes),
            [&](int lane, T& team_dot) {
              T s = 0;
              for (int j = lane; j <= r.i; j += lanes) s += g[j] * widen<T>(p[j]);
              team_dot += s;
            },
            dot);
        team.team_barrier();  // every read of g before the first write (ds is g when A is T)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, seq), [&](int j) {
          ds[j] = j <= r.i ? narrow<A>(scale * widen<T>(p[j]) * (g[j] - dot)) : narrow<A>(T(0));
        });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](int d) {
          T s = 0;
          for (int j = 0; j <= r.i; ++j) s += widen<T>(ds[j]) * widen<T>(qkv(row0 + j, k0 + d));
          dqkv(row0 + r.i, q0 + d) = narrow<A>(s);
        });
      });
  // Key rows, once every dS is complete (the next launch on the same space): dv_j = P[:, j]^T dO and
  // dk_j = dS[:, j]^T Q over the query rows i >= j.
  const View4<const A> ds = dscores;
  for_each_team(
      "kpipe::nn::Attention::backward_input::columns", space, rows, KOKKOS_LAMBDA(const Team& team) {
        const HeadRow r(team.league_rank(), heads, seq);  // r.i is the key position here
        const std::int64_t row0 = std::int64_t(r.b) * seq;
        const std::int64_t q0 = std::int64_t(r.h) * hd, k0 = channels + q0, v0 = 2 * channels + q0;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](int d) {
          T dv = 0, dk = 0;
          for (int i = r.i; i < seq; ++i) {
            dv += widen<T>(probs(r.b, r.h, i, r.i)) * widen<T>(dout(row0 + i, q0 + d));
            dk += widen<T>(ds(r.b, r.h, i, r.i)) * widen<T>(qkv(row0 + i, q0 + d));
          }
          dqkv(row0 + r.i, v0 + d) = narrow<A>(dv);
          dqkv(row0 + r.i, k0 + d) = narrow<A>(dk);
        });
      });
}

}  // namespace attention_detail

template <class A> AttentionStash<A> allocate_stash(const AttentionShape& shape, bool qkv, bool probs) {
  attention_detail::require_positive(shape);
  const int b = shape.batch, h = shape.heads, t = shape.seq, d = shape.head_dim;
  AttentionStash<A> stash;
  if (qkv) stash.qkv = View2<A>(uninitialized("kpipe::nn::Attention::qkv"), shape.rows(), 3 * std::int64_t(h) * d);
  if (probs) stash.probs = View4<A>(uninitialized("kpipe::nn::Attention::probs"), b, h, t, t);
  return stash;
}

template <class T, class A> AttentionWorkElements attention_work_elements(const AttentionShape& shape) {
  const std::int64_t square = std::int64_t(shape.batch) * shape.heads * shape.seq * shape.seq;
  AttentionWorkElements e;
  e.t = square;
  if constexpr (mixed_precision<T, A>) {
    e.a = square;
    // The host path's products: blocks of at most causal_block query rows (or key columns) of one head;
    // scores and dP in T (causal_scores), out, dq, dk and dv in A (lower_times, lower_transposed_times).
    const std::int64_t rows = std::min<std::int64_t>(attention_detail::causal_block, shape.seq);
    e.workspace = std::max(blas::workspace_elements<A, T>(rows, shape.seq, shape.head_dim),
                           blas::workspace_elements<A, A>(rows, shape.head_dim, shape.seq));
  }
  return e;
}

template <class T, class A> AttentionWork<T, A> allocate_work(const AttentionShape& shape) {
  attention_detail::require_positive(shape);
  const AttentionWorkElements e = attention_work_elements<T, A>(shape);
  AttentionWork<T, A> work;
  work.dprobs = View4<T>(uninitialized("kpipe::nn::Attention::dprobs"), shape.batch, shape.heads, shape.seq, shape.seq);
  if (e.a > 0)
    work.dscores =
        View4<A>(uninitialized("kpipe::nn::Attention::dscores"), shape.batch, shape.heads, shape.seq, shape.seq);
  if (e.workspace > 0) work.workspace = View1<float>(uninitialized("kpipe::nn::Attention::workspace"), e.workspace);
  return work;
}

template <class T, KernelPath P, class A>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, In2<A> qkv, const AttentionStash<A>& stash,
                       const AttentionWork<T, A>& work, const View2<A>& out) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("qkv", qkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  require_extents("out", out, shape.rows(), shape.channels());

  const int hd = shape.head_dim;
  if (qkv.data() != stash.qkv.data()) Kokkos::deep_copy(space, stash.qkv, qkv);
  const View2<const A> x = stash.qkv;
  const View4<T> scores = scores_of(stash, work);
  if constexpr (P == KernelPath::device) {
    forward_rows(space, shape, x, scores, stash.probs, out);
  } else {  // host path: per-head products through the host BLAS
    const View1<float>& ws = work.workspace;
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h)
        causal_scores(space, qkv_head(x, shape, 0, b, h), qkv_head(x, shape, 1, b, h), head(scores, b, h), ws);
    causal_softmax(space, scores, stash.probs, T(1) / math::sqrt(T(hd)));
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h)  // head h's output straight into its columns of out
        lower_times(space, head(stash.probs, b, h), qkv_head(x, shape, 2, b, h),
                    sequence_columns(out, shape, b, h * hd, hd), ws);
  }
}

template <class T, KernelPath P, class A>
void attention_backward_input(const ExecSpace& space, const AttentionShape& shape, const AttentionStash<A>& stash,
                              const AttentionWork<T, A>& work, In2<A> dout, const View2<A>& dqkv) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("dout", dout, shape.rows(), shape.channels());
  require_extents("dqkv", dqkv, shape.rows(), 3 * std::int64_t(shape.channels()));

  const int hd = shape.head_dim;
  const std::int64_t channels = shape.channels();
  const View2<const A> dy = dout;
  const View2<const A> x = stash.qkv;
  const View4<A> dscores = dscores_of(work);  // dL/d(q k^T): over dprobs in place when A is T
  if constexpr (P == KernelPath::device) {
    backward_rows(space, shape, x, View4<const A>(stash.probs), dy, work.dprobs, dscores, dqkv);
  } else {  // host path: per-head products through the host BLAS
    const View1<float>& ws = work.workspace;
    // dO of head h is its columns of dout; dq, dk, dv of head h go straight into their columns of dqkv.
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h) {
        const auto dheads = sequence_columns(dy, shape, b, h * hd, hd);
        causal_scores(space, dheads, qkv_head(x, shape, 2, b, h), head(work.dprobs, b, h), ws);  // dP = dO v^T
        lower_transposed_times(space, head(stash.probs, b, h), dheads,
                               sequence_columns(dqkv, shape, b, 2 * channels + h * hd, hd), ws);  // dv = P^T dO
      }
    causal_softmax_backward(space, stash.probs, work.dprobs, dscores, T(1) / math::sqrt(T(hd)));
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.heads; ++h) {
        lower_times(space, head(dscores, b, h), qkv_head(x, shape, 1, b, h),
                    sequence_columns(dqkv, shape, b, h * hd, hd), ws);  // dq = dS k
        lower_transposed_times(space, head(dscores, b, h), qkv_head(x, shape, 0, b, h),
                               sequence_columns(dqkv, shape, b, channels + h * hd, hd), ws);  // dk = dS^T q
      }
  }
}

double attention_forward_flops(const AttentionShape& shape) {
  const double heads = double(shape.batch) * shape.heads;
  return heads * (blas::gemm_flops(shape.seq, shape.seq, shape.head_dim) +
                  blas::gemm_flops(shape.seq, shape.head_dim, shape.seq));
}

// Float (training), double (gradient checks), float accumulating bf16 storage (mixed precision); both paths.
template AttentionStash<float> allocate_stash<float>(const AttentionShape&, bool, bool);
template AttentionStash<double> allocate_stash<double>(const AttentionShape&, bool, bool);
template AttentionStash<bf16> allocate_stash<bf16>(const AttentionShape&, bool, bool);
template AttentionWork<float, float> allocate_work<float, float>(const AttentionShape&);
template AttentionWorkElements attention_work_elements<float, float>(const AttentionShape&);
template void attention_forward<float, KernelPath::host, float>(const ExecSpace&, const AttentionShape&, In2<float>,
                                                                const AttentionStash<float>&,
                                                                const AttentionWork<float, float>&,
                                                                const View2<float>&);
template void attention_backward_input<float, KernelPath::host, float>(const ExecSpace&, const AttentionShape&,
                                                                       const AttentionStash<float>&,
                                                                       const AttentionWork<float, float>&, In2<float>,
                                                                       const View2<float>&);
template void attention_forward<float, KernelPath::device, float>(const ExecSpace&, const AttentionShape&, In2<float>,
                                                                  const AttentionStash<float>&,
                                                                  const AttentionWork<float, float>&,
                                                                  const View2<float>&);
template void attention_backward_input<float, KernelPath::device, float>(const ExecSpace&, const AttentionShape&,
                                                                         const AttentionStash<float>&,
                                                                         const AttentionWork<float, float>&, In2<float>,
                                                                         const View2<float>&);
template AttentionWork<double, double> allocate_work<double, double>(const AttentionShape&);
template AttentionWorkElements attention_work_elements<double, double>(const AttentionShape&);
template void attention_forward<double, KernelPath::host, double>(const ExecSpace&, const AttentionShape&, In2<double>,
                                                                  const AttentionStash<double>&,
                                                                  const AttentionWork<double, double>&,
                                                                  const View2<double>&);
template void attention_backward_input<double, KernelPath::host, double>(const ExecSpace&, const AttentionShape&,
                                                                         const AttentionStash<double>&,
                                                                         const AttentionWork<double, double>&,
                                                                         In2<double>, const View2<double>&);
template void attention_forward<double, KernelPath::device, double>(const ExecSpace&, const AttentionShape&,
                                                                    In2<double>, const AttentionStash<double>&,
                                                                    const AttentionWork<double, double>&,
                                                                    const View2<double>&);
template void attention_backward_input<double, KernelPath::device, double>(const ExecSpace&, const AttentionShape&,
                                                                           const AttentionStash<double>&,
                                                                           const AttentionWork<double, double>&,
                                                                           In2<double>, const View2<double>&);
template AttentionWork<float, bf16> allocate_work<float, bf16>(const AttentionShape&);
template AttentionWorkElements attention_work_elements<float, bf16>(const AttentionShape&);
template void attention_forward<float, KernelPath::host, bf16>(const ExecSpace&, const AttentionShape&, In2<bf16>,
                                                               const AttentionStash<bf16>&,
                                                               const AttentionWork<float, bf16>&, const View2<bf16>&);
template void attention_backward_input<float, KernelPath::host, bf16>(const ExecSpace&, const AttentionShape&,
                                                                      const AttentionStash<bf16>&,
                                                                      const AttentionWork<float, bf16>&, In2<bf16>,
                                                                      const View2<bf16>&);
template void attention_forward<float, KernelPath::device, bf16>(const ExecSpace&, const AttentionShape&, In2<bf16>,
                                                                 const AttentionStash<bf16>&,
                                                                 const AttentionWork<float, bf16>&, const View2<bf16>&);
template void attention_backward_input<float, KernelPath::device, bf16>(const ExecSpace&, const AttentionShape&,
                                                                        const AttentionStash<bf16>&,
                                                                        const AttentionWork<float, bf16>&, In2<bf16>,
                                                                        const View2<bf16>&);

}  // namespace kpipe::nn
