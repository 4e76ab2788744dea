#include "kpipe/nn/attention.hpp"

#include <algorithm>

#include "kpipe/core/blas.hpp"
#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/nn/strided_max.hpp"

namespace kpipe::nn {

// Helpers for the attention kernels. A named namespace, not an anonymous one: kernels may not be
// lambdas in anonymous namespaces (CUDA).
namespace attention_detail {

using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;
using blas::StridedBatch;

static_assert(attention_block_rows % simd_lanes == 0, "the host softmax sweeps whole vectors inside a block");

// Row i of a causal block holds n = i + 1 live entries; the host softmax sweeps run over whole vectors, up to the
// next multiple of simd_lanes (or the block's last key), which the scores product has filled.
KOKKOS_INLINE_FUNCTION std::int64_t whole_vectors(std::int64_t n, std::int64_t keys) {
  return math::min<std::int64_t>(keys, (n + simd_lanes - 1) / simd_lanes * simd_lanes);
}

// exp(scale * s - max): the one expression the forward and the backward both evaluate, so that a recomputed
// probability has the bits of the forward's.
template <KernelPath P, class T> KOKKOS_INLINE_FUNCTION T exponential(T s, T scale, T max) {
  if constexpr (P == KernelPath::host) {
    return math::fast_exp(scale * s - max);
  } else {
    return math::exp(scale * s - max);
  }
}

// Query rows r0..r1-1: a block of the T x T products, which reads keys 0..r1-1.
struct RowBlock {
  std::int64_t r0, r1;
  std::int64_t rows() const { return r1 - r0; }
};

// Rows r0..r1-1 of every head of a head-major [B*H, T, hd] tensor, as one strided batch.
template <class E> StridedBatch<E> head_rows(const View3<E>& x, std::int64_t r0, std::int64_t r1) {
  const std::int64_t t = x.extent(1), hd = x.extent(2);
  return {x.data() + r0 * hd, r1 - r0, hd, hd, t * hd, std::int64_t(x.extent(0))};
}
template <class E> StridedBatch<const E> head_rows_const(const View3<E>& x, std::int64_t r0, std::int64_t r1) {
  return head_rows(x, r0, r1).as_const();
}
// A block's rows x keys matrices of a [B*H, rows per block, T] buffer.
template <class E> StridedBatch<E> block_matrices(const View3<E>& x, const RowBlock& block) {
  const std::int64_t ld = x.extent(2);
  return {x.data(), block.rows(), block.r1, ld, std::int64_t(x.extent(1)) * ld, std::int64_t(x.extent(0))};
}

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
void require_extents(const char* name, const V& view, std::int64_t e0, std::int64_t e1, std::int64_t e2) {
  require(std::int64_t(view.extent(0)) == e0 && std::int64_t(view.extent(1)) == e1 &&
              std::int64_t(view.extent(2)) == e2,
          "attention: {} must be [{}, {}, {}], got [{}, {}, {}]", name, e0, e1, e2, view.extent(0), view.extent(1),
          view.extent(2));
}

template <class T, class A>
void require_buffers(const AttentionShape& shape, const AttentionStash<T, A>& stash, const AttentionWork<T, A>& work) {
  require_positive(shape);
  const std::int64_t bh = shape.heads_in_batch(), t = shape.seq, hd = shape.head_dim, rows = block_rows(shape);
  require_extents("stash.qkv", stash.qkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  require_extents("stash.softmax", stash.softmax, bh, t, 2);
  for (const auto* heads : {&work.q, &work.k, &work.v, &work.o, &work.dq})
    require_extents("work's head-major copies", *heads, bh, t, hd);
  require_extents("work.dk", work.dk, bh, t, hd);
  require_extents("work.dv", work.dv, bh, t, hd);
  require_extents("work.scores", work.scores, bh, rows, t);
  require_extents("work.dprobs", work.dprobs, bh, rows, t);
  if constexpr (mixed_precision<T, A>) {
    require_extents("work.probs", work.probs, bh, rows, t);
    require_extents("work.dscores", work.dscores, bh, rows, t);
  }
}

// A block's probabilities: over its scores in place when A is T, into the A buffer otherwise.
template <class T, class A> View3<A> probs_of(const AttentionWork<T, A>& work) {
  if constexpr (mixed_precision<T, A>) {
    return work.probs;
  } else {
    return work.scores;
  }
}
// A block's dL/d(q k^T): over dL/dprobs in place when A is T, into the A buffer otherwise.
template <class T, class A> View3<A> dscores_of(const AttentionWork<T, A>& work) {
  if constexpr (mixed_precision<T, A>) {
    return work.dscores;
  } else {
    return work.dprobs;
  }
}

// ---- Between the packed [B*T, x] activations and the head-major copies ----

// f(item, d) for every element d < hd of `items` rows of hd elements: the host path walks a row per work item
// (a vectorized loop), the device path an element per thread (coalesced).
template <KernelPath P, class F>
void for_each_head_element(const char* label, const ExecSpace& space, std::int64_t items, int hd, const F& f) {
  if constexpr (P == KernelPath::host) {
    Kokkos::parallel_for(label, range(space, items), KOKKOS_LAMBDA(std::int64_t item) {
      for (int d = 0; d < hd; ++d) f(item, d);
    });
  } else {
    Kokkos::parallel_for(label, range(space, items * hd), KOKKOS_LAMBDA(std::int64_t e) {
      f(e / hd, int(e % hd));
    });
  }
}

// Where row n of a packed activation and head h meet in a head-major tensor: element (b*H + h, t, 0).
KOKKOS_INLINE_FUNCTION std::int64_t head_major_row(std::int64_t n, int h, int heads, int seq) {
  return (n / seq * heads + h) * seq + n % seq;
}

// qkv[B*T, 3C] -> q, k, v head-major; with dout[B*T, C] (backward) also dout -> o.
template <KernelPath P, class A>
void gather_heads(const ExecSpace& space, const AttentionShape& shape, const View2<const A>& qkv,
                  const View2<const A>& dout, const View3<A>& q, const View3<A>& k, const View3<A>& v,
                  const View3<A>& o) {
  const int heads = shape.heads, seq = shape.seq, hd = shape.head_dim, parts = dout.data() != nullptr ? 4 : 3;
  const std::int64_t channels = shape.channels();
  A* const targets[4] = {q.data(), k.data(), v.data(), o.data()};
  for_each_head_element<P>(
      "kpipe::nn::Attention::gather_heads", space, shape.rows() * parts * heads, hd,
      KOKKOS_LAMBDA(std::int64_t item, int d) {
        const std::int64_t n = item / (parts * heads);
        const int part = int(item % (parts * heads)) / heads, h = int(item % heads);
        const std::int64_t column = std::int64_t(h) * hd + d;
        const A x = part < 3 ? qkv(n, part * channels + column) : dout(n, column);
        targets[part][head_major_row(n, h, heads, seq) * hd + d] = x;
      });
}

// o head-major -> out[B*T, C]
template <KernelPath P, class A>
void scatter_output(const ExecSpace& space, const AttentionShape& shape, const View3<A>& o, const View2<A>& out) {
  const int heads = shape.heads, seq = shape.seq, hd = shape.head_dim;
  const A* const from = o.data();
  for_each_head_element<P>(
      "kpipe::nn::Attention::forward::scatter_heads", space, shape.rows() * heads, hd,
      KOKKOS_LAMBDA(std::int64_t item, int d) {
        const std::int64_t n = item / heads;
        const int h = int(item % heads);
        out(n, std::int64_t(h) * hd + d) = from[head_major_row(n, h, heads, seq) * hd + d];
      });
}

// dq (A), dk and dv (T) head-major -> dqkv[B*T, 3C], dk and dv rounded to A once.
template <KernelPath P, class T, class A>
void scatter_gradients(const ExecSpace& space, const AttentionShape& shape, const AttentionWork<T, A>& work,
                       const View2<A>& dqkv) {
  const int heads = shape.heads, seq = shape.seq, hd = shape.head_dim;
  const std::int64_t channels = shape.channels();
  const A* const dq = work.dq.data();
  const T* const dk = work.dk.data();
  const T* const dv = work.dv.data();
  for_each_head_element<P>(
      "kpipe::nn::Attention::backward_input::scatter_heads", space, shape.rows() * 3 * heads, hd,
      KOKKOS_LAMBDA(std::int64_t item, int d) {
        const std::int64_t n = item / (3 * heads);
        const int part = int(item % (3 * heads)) / heads, h = int(item % heads);
        const std::int64_t from = head_major_row(n, h, heads, seq) * hd + d;
        const A x = part == 0 ? dq[from] : narrow<A>(part == 1 ? dk[from] : dv[from]);
        dqkv(n, part * channels + std::int64_t(h) * hd + d) = x;
      });
}

// ---- The softmax of a block and its backward ----
// Row r of a block is head r / rows of the batch, query r0 + r % rows; its live keys are 0..i, the block's
// keys 0..r1-1. Entries above the diagonal get exact zeros, since the products after read every key of the block.

struct BlockRow {
  std::int64_t head, row;  // head of the batch (b*H + h), row of the block
  std::int64_t i;          // query position
  KOKKOS_INLINE_FUNCTION BlockRow(std::int64_t r, std::int64_t rows, std::int64_t r0)
      : head(r / rows), row(r % rows), i(r0 + r % rows) {}
};

// scores (raw q k^T) -> probs (the causal softmax of scale * scores, in place when A is T) and the row's
// statistics. Host path: a thread per row, three vectorized sweeps (max, exponentials and their sum, scaling).
template <class T, class A>
void softmax_rows_host(const ExecSpace& space, const View3<T>& scores, const View3<A>& probs,
                       const View3<T>& softmax, const RowBlock& block, T scale) {
  const std::int64_t rows = block.rows(), r0 = block.r0, keys = block.r1;
  Kokkos::parallel_for(
      "kpipe::nn::Attention::forward::softmax", range(space, scores.extent(0) * rows), KOKKOS_LAMBDA(std::int64_t r) {
        const BlockRow at(r, rows, r0);
        T* KOKKOS_RESTRICT s = &scores(at.head, at.row, 0);
        // Taken here, not first inside the if constexpr below (which CUDA's extended lambdas refuse).
        A* const row_probs = &probs(at.head, at.row, 0);  // s itself when A is T
        const std::int64_t n = at.i + 1, padded = whole_vectors(n, keys);
        // max(scale * x) = scale * max(x), scale > 0. Masked lanes count as nothing.
        const T row_max = lane_max<T>(padded, [&](std::int64_t j) { return j < n ? s[j] : s[0]; }) * scale;
        const T sum = lane_sum<T>(padded, [&](std::int64_t j) {
          const T e = j < n ? exponential<KernelPath::host>(s[j], scale, row_max) : T(0);
          s[j] = e;
          return e;
        });
        const T inv_sum = T(1) / sum;  // sum >= 1: the maximum contributes exp(0)
        softmax(at.head, at.i, 0) = row_max;
        softmax(at.head, at.i, 1) = inv_sum;
        if constexpr (mixed_precision<T, A>) {
          A* KOKKOS_RESTRICT p = row_probs;
          for (std::int64_t j = 0; j < padded; ++j) p[j] = narrow<A>(s[j] * inv_sum);
          for (std::int64_t j = padded; j < keys; ++j) p[j] = narrow<A>(T(0));
        } else {
          (void)row_probs;
          for (std::int64_t j = 0; j < padded; ++j) s[j] *= inv_sum;
          for (std::int64_t j = padded; j < keys; ++j) s[j] = T(0);
        }
      });
}

// The same, device path: a team per row, each thread a strided share of the row (coalesced), the shares combined
// in a fixed order.
template <class T, class A>
void softmax_rows_device(const ExecSpace& space, const View3<T>& scores, const View3<A>& probs,
                         const View3<T>& softmax, const RowBlock& block, T scale) {
  const std::int64_t rows = block.rows(), r0 = block.r0;
  const int keys = int(block.r1);
  for_each_team(
      "kpipe::nn::Attention::forward::softmax", space, scores.extent(0) * rows, KOKKOS_LAMBDA(const Team& team) {
        const BlockRow at(team.league_rank(), rows, r0);
        const int i = int(at.i), lanes = team.team_size();
        T* const s = &scores(at.head, at.row, 0);
        A* const p = &probs(at.head, at.row, 0);
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
                const T e = exponential<KernelPath::device>(s[j], scale, row_max);
                s[j] = e;
                partial += e;
              }
              team_sum += partial;
            },
            sum);
        const T inv_sum = T(1) / sum;  // sum >= 1: the maximum contributes exp(0)
        team.team_barrier();           // the next sweep splits the row among the threads differently
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys),
                             [&](int j) { p[j] = j <= i ? narrow<A>(s[j] * inv_sum) : narrow<A>(T(0)); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          softmax(at.head, at.i, 0) = row_max;
          softmax(at.head, at.i, 1) = inv_sum;
        });
      });
}

// (scores = raw q k^T, grad = dL/dprobs) -> probs (recomputed from the statistics, the forward's bits; in place
// over scores when A is T) and dscores = dL/d(q k^T) = scale P_ij (grad_ij - sum_k grad_ik P_ik) (in place over
// grad when A is T), both with exact zeros above the diagonal. Host path: a thread per row, vectorized sweeps.
template <class T, class A>
void softmax_backward_rows_host(const ExecSpace& space, const View3<T>& scores, const View3<T>& grad,
                                const View3<A>& probs, const View3<A>& dscores, const View3<const T>& softmax,
                                const RowBlock& block, T scale) {
  const std::int64_t rows = block.rows(), r0 = block.r0, keys = block.r1;
  Kokkos::parallel_for(
      "kpipe::nn::Attention::backward_input::softmax", range(space, scores.extent(0) * rows),
      KOKKOS_LAMBDA(std::int64_t r) {
        const BlockRow at(r, rows, r0);
        const T* const s = &scores(at.head, at.row, 0);
        A* const p = &probs(at.head, at.row, 0);  // s itself when A is T
        T* const g = &grad(at.head, at.row, 0);
        A* const ds = &dscores(at.head, at.row, 0);  // g itself when A is T
        const T row_max = softmax(at.head, at.i, 0), inv_sum = softmax(at.head, at.i, 1);
        const std::int64_t n = at.i + 1, padded = whole_vectors(n, keys);
        for (std::int64_t j = 0; j < keys; ++j)
          p[j] = narrow<A>(j < n ? exponential<KernelPath::host>(s[j], scale, row_max) * inv_sum : T(0));
        const T dot = lane_sum<T>(padded, [&](std::int64_t j) { return j < n ? g[j] * widen<T>(p[j]) : T(0); });
        for (std::int64_t j = 0; j < keys; ++j) ds[j] = narrow<A>(j < n ? scale * widen<T>(p[j]) * (g[j] - dot) : T(0));
      });
}

// The same, device path: a team per row.
template <class T, class A>
void softmax_backward_rows_device(const ExecSpace& space, const View3<T>& scores, const View3<T>& grad,
                                  const View3<A>& probs, const View3<A>& dscores, const View3<const T>& softmax,
                                  const RowBlock& block, T scale) {
  const std::int64_t rows = block.rows(), r0 = block.r0;
  const int keys = int(block.r1);
  for_each_team(
      "kpipe::nn::Attention::backward_input::softmax", space, scores.extent(0) * rows,
      KOKKOS_LAMBDA(const Team& team) {
        const BlockRow at(team.league_rank(), rows, r0);
        const int i = int(at.i), lanes = team.team_size();
        const T* const s = &scores(at.head, at.row, 0);
        A* const p = &probs(at.head, at.row, 0);
        T* const g = &grad(at.head, at.row, 0);
        A* const ds = &dscores(at.head, at.row, 0);
        const T row_max = softmax(at.head, at.i, 0), inv_sum = softmax(at.head, at.i, 1);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys), [&](int j) {
          p[j] = j <= i ? narrow<A>(exponential<KernelPath::device>(s[j], scale, row_max) * inv_sum)
                        : narrow<A>(T(0));
        });
        team.team_barrier();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, lanes),
            [&](int lane, T& team_dot) {
              T partial = 0;
              for (int j = lane; j <= i; j += lanes) partial += g[j] * widen<T>(p[j]);
              team_dot += partial;
            },
            dot);
        team.team_barrier();  // every read of g before the first write (ds is g when A is T)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys), [&](int j) {
          ds[j] = j <= i ? narrow<A>(scale * widen<T>(p[j]) * (g[j] - dot)) : narrow<A>(T(0));
        });
      });
}

template <KernelPath P, class T, class A>
void softmax_rows(const ExecSpace& space, const View3<T>& scores, const View3<A>& probs, const View3<T>& softmax,
                  const RowBlock& block, T scale) {
  if constexpr (P == KernelPath::host) {
    softmax_rows_host(space, scores, probs, softmax, block, scale);
  } else {
    softmax_rows_device(space, scores, probs, softmax, block, scale);
  }
}

template <KernelPath P, class T, class A>
void softmax_backward_rows(const ExecSpace& space, const View3<T>& scores, const View3<T>& grad,
                           const View3<A>& probs, const View3<A>& dscores, const View3<const T>& softmax,
                           const RowBlock& block, T scale) {
  if constexpr (P == KernelPath::host) {
    softmax_backward_rows_host(space, scores, grad, probs, dscores, softmax, block, scale);
  } else {
    softmax_backward_rows_device(space, scores, grad, probs, dscores, softmax, block, scale);
  }
}

template <class T> T softmax_scale(const AttentionShape& shape) { return T(1) / math::sqrt(T(shape.head_dim)); }

}  // namespace attention_detail

template <class T, class A> AttentionStash<T, A> allocate_stash(const AttentionShape& shape, bool qkv, bool softmax) {
  attention_detail::require_positive(shape);
  AttentionStash<T, A> stash;
  if (qkv)
    stash.qkv = View2<A>(uninitialized("kpipe::nn::Attention::qkv"), shape.rows(), 3 * std::int64_t(shape.channels()));
  if (softmax)
    stash.softmax = View3<T>(uninitialized("kpipe::nn::Attention::softmax"), shape.heads_in_batch(), shape.seq, 2);
  return stash;
}

template <class T, class A> AttentionWorkElements attention_work_elements(const AttentionShape& shape) {
  const std::int64_t heads = shape.heads_in_batch() * shape.seq * shape.head_dim;  // one head-major tensor
  const std::int64_t block = shape.heads_in_batch() * block_rows(shape) * shape.seq;
  AttentionWorkElements e;
  e.a = 5 * heads;              // q, k, v, o, dq
  e.t = 2 * heads + 2 * block;  // dk, dv, scores, dprobs
  if constexpr (mixed_precision<T, A>) {
    e.a += 2 * block;  // probs, dscores
    // The host path's products, one matrix at a time: scores and dP (rows x T by T x hd), out and dq
    // (rows x hd by hd x T... their sums over the keys), dk and dv (T x hd over the block's rows).
    const std::int64_t rows = block_rows(shape), t = shape.seq, hd = shape.head_dim;
    e.workspace = std::max({blas::workspace_elements<A, T>(rows, t, hd), blas::workspace_elements<A, A>(rows, hd, t),
                            blas::workspace_elements<A, T>(t, hd, rows)});
  }
  return e;
}

template <class T, class A> AttentionWork<T, A> allocate_work(const AttentionShape& shape) {
  attention_detail::require_positive(shape);
  const AttentionWorkElements e = attention_work_elements<T, A>(shape);
  const std::int64_t bh = shape.heads_in_batch(), t = shape.seq, hd = shape.head_dim, rows = block_rows(shape);
  auto heads = [&](const char* label) { return View3<A>(uninitialized(label), bh, t, hd); };
  AttentionWork<T, A> work;
  work.q = heads("kpipe::nn::Attention::q");
  work.k = heads("kpipe::nn::Attention::k");
  work.v = heads("kpipe::nn::Attention::v");
  work.o = heads("kpipe::nn::Attention::o");
  work.dq = heads("kpipe::nn::Attention::dq");
  work.dk = View3<T>(uninitialized("kpipe::nn::Attention::dk"), bh, t, hd);
  work.dv = View3<T>(uninitialized("kpipe::nn::Attention::dv"), bh, t, hd);
  work.scores = View3<T>(uninitialized("kpipe::nn::Attention::scores"), bh, rows, t);
  work.dprobs = View3<T>(uninitialized("kpipe::nn::Attention::dprobs"), bh, rows, t);
  if constexpr (mixed_precision<T, A>) {
    work.probs = View3<A>(uninitialized("kpipe::nn::Attention::probs"), bh, rows, t);
    work.dscores = View3<A>(uninitialized("kpipe::nn::Attention::dscores"), bh, rows, t);
  }
  if (e.workspace > 0) work.workspace = View1<float>(uninitialized("kpipe::nn::Attention::workspace"), e.workspace);
  return work;
}

// Per block of query rows: S = Q K^T, the softmax, O = P V.
template <class T, class A, KernelPath P>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, In2<A> qkv,
                       const AttentionStash<T, A>& stash, const AttentionWork<T, A>& work, const View2<A>& out) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("qkv", qkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  require_extents("out", out, shape.rows(), shape.channels());
  if (qkv.data() != stash.qkv.data()) Kokkos::deep_copy(space, stash.qkv, qkv);
  gather_heads<P, A>(space, shape, stash.qkv, {}, work.q, work.k, work.v, work.o);
  const T scale = softmax_scale<T>(shape);
  const View3<A> probs = probs_of(work);
  const View1<float>& ws = work.workspace;
  for (std::int64_t r0 = 0; r0 < shape.seq; r0 += block_rows(shape)) {
    const RowBlock block{r0, std::min<std::int64_t>(shape.seq, r0 + block_rows(shape))};
    blas::gemm_strided_batched<A, T>(space, "N", "T", 1, head_rows_const(work.q, block.r0, block.r1),
                                     head_rows_const(work.k, 0, block.r1), 0, block_matrices(work.scores, block),
                                     blas::Math::exact, ws);
    softmax_rows<P>(space, work.scores, probs, stash.softmax, block, scale);
    blas::gemm_strided_batched<A, A>(space, "N", "N", 1, block_matrices(probs, block).as_const(),
                                     head_rows_const(work.v, 0, block.r1), 0, head_rows(work.o, block.r0, block.r1),
                                     blas::Math::exact, ws);
  }
  scatter_output<P>(space, shape, work.o, out);
}

// Per block of query rows, the last first: S = Q K^T and dP = dO V^T, the probabilities recomputed and the
// softmax's backward, dQ = dS K, and dK += dS^T Q, dV += P^T dO over the block's keys. The last block reaches
// every key, so it writes dK and dV whole (beta 0) and the blocks before it add to them in a fixed order.
template <class T, class A, KernelPath P>
void attention_backward_input(const ExecSpace& space, const AttentionShape& shape, const AttentionStash<T, A>& stash,
                              const AttentionWork<T, A>& work, In2<A> dout, const View2<A>& dqkv) {
  using namespace attention_detail;
  require_buffers(shape, stash, work);
  require_extents("dout", dout, shape.rows(), shape.channels());
  require_extents("dqkv", dqkv, shape.rows(), 3 * std::int64_t(shape.channels()));
  gather_heads<P, A>(space, shape, stash.qkv, dout, work.q, work.k, work.v, work.o);
  const T scale = softmax_scale<T>(shape);
  const View3<A> probs = probs_of(work), dscores = dscores_of(work);
  const View1<float>& ws = work.workspace;
  const std::int64_t rows = block_rows(shape), last = (shape.seq - 1) / rows * rows;
  for (std::int64_t r0 = last; r0 >= 0; r0 -= rows) {
    const RowBlock block{r0, std::min<std::int64_t>(shape.seq, r0 + rows)};
    const T beta = r0 == last ? T(0) : T(1);
    blas::gemm_strided_batched<A, T>(space, "N", "T", 1, head_rows_const(work.q, block.r0, block.r1),
                                     head_rows_const(work.k, 0, block.r1), 0, block_matrices(work.scores, block),
                                     blas::Math::exact, ws);
    blas::gemm_strided_batched<A, T>(space, "N", "T", 1, head_rows_const(work.o, block.r0, block.r1),
                                     head_rows_const(work.v, 0, block.r1), 0, block_matrices(work.dprobs, block),
                                     blas::Math::exact, ws);
    softmax_backward_rows<P>(space, work.scores, work.dprobs, probs, dscores, View3<const T>(stash.softmax), block,
                             scale);
    const StridedBatch<const A> p = block_matrices(probs, block).as_const();
    const StridedBatch<const A> ds = block_matrices(dscores, block).as_const();
    blas::gemm_strided_batched<A, A>(space, "N", "N", 1, ds, head_rows_const(work.k, 0, block.r1), 0,
                                     head_rows(work.dq, block.r0, block.r1), blas::Math::exact, ws);
    blas::gemm_strided_batched<A, T>(space, "T", "N", 1, ds, head_rows_const(work.q, block.r0, block.r1), beta,
                                     head_rows(work.dk, 0, block.r1), blas::Math::exact, ws);
    blas::gemm_strided_batched<A, T>(space, "T", "N", 1, p, head_rows_const(work.o, block.r0, block.r1), beta,
                                     head_rows(work.dv, 0, block.r1), blas::Math::exact, ws);
  }
  scatter_gradients<P>(space, shape, work, dqkv);
}

double attention_forward_flops(const AttentionShape& shape) {
  const double heads = double(shape.heads_in_batch());
  return heads * (blas::gemm_flops(shape.seq, shape.seq, shape.head_dim) +
                  blas::gemm_flops(shape.seq, shape.head_dim, shape.seq));
}

#define KPIPE_INSTANTIATE_KERNEL(T, A, P)                                                                             \
  template void attention_forward<T, A, P>(const ExecSpace&, const AttentionShape&, In2<A>,                           \
                                           const AttentionStash<T, A>&, const AttentionWork<T, A>&,                   \
                                           const View2<A>&);                                                          \
  template void attention_backward_input<T, A, P>(const ExecSpace&, const AttentionShape&,                            \
                                                  const AttentionStash<T, A>&, const AttentionWork<T, A>&,            \
                                                  In2<A>, const View2<A>&);
#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template AttentionStash<T, A> allocate_stash<T, A>(const AttentionShape&, bool, bool);                              \
  template AttentionWork<T, A> allocate_work<T, A>(const AttentionShape&);                                            \
  template AttentionWorkElements attention_work_elements<T, A>(const AttentionShape&);
KPIPE_CHECKED_KERNELS(KPIPE_INSTANTIATE_KERNEL)
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE_KERNEL
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::nn
