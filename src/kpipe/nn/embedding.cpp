#include "kpipe/nn/embedding.hpp"

#include <Kokkos_Sort.hpp>

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/fence.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::nn {

// Token ids come from data the user supplied: checked in the kernel, where the table is read.
KOKKOS_INLINE_FUNCTION bool valid_token(Token t, Token vocab) { return t >= 0 && t < vocab; }

// The rows must be whole sequences of `seq` tokens, each position having a row in the position table.
static void check_sequences(std::int64_t rows, int seq, std::int64_t positions) {
  require(seq > 0 && seq <= positions, "model.seq_len = {} must be in [1, {}] (rows of the position table)", seq,
          positions);
  require(rows % seq == 0, "model.seq_len = {} does not divide the {} tokens of the batch", seq, rows);
}

// tokens[B*T] -> out[B*T, C]
template <class T, class A>
void forward(const ExecSpace& space, const Embedding<T, A>& emb, const View1<const Token>& tokens, int seq,
             const View2<A>& out) {
  check_sequences(tokens.extent(0), seq, emb.position.extent(0));
  const auto token = emb.token;
  const auto position = emb.position;
  const Token vocab = Token(token.extent(0));
  Kokkos::parallel_for("kpipe::nn::Embedding::forward", range2(space, out.extent(0), out.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t i, std::int64_t c) {
                         const Token t = tokens(i);
                         out(i, c) = narrow<A>(valid_token(t, vocab) ? token(t, c) + position(i % seq, c)
                                                                     : math::log(T(-1)));
                       });
}

// Sorts the keys in place. Each key is unique (it holds its row), so every sort gives the same order.
static void sort_unique_keys(const ExecSpace& space, const View1<std::int64_t>& keys) {
#if KOKKOS_VERSION >= 40000
  Kokkos::sort(space, keys);
#else
  named_fence(space, "kpipe::nn::embedding: sort on the default instance");  // Kokkos 3.4's sort takes no execution space instance: it runs on the default one
  Kokkos::sort(keys);
#endif
}

template <class T> EmbeddingScratch<T> allocate_scratch(std::int64_t rows, std::int64_t channels) {
  return {View1<std::int64_t>(uninitialized("kpipe::nn::Embedding::order"), rows),
          View2<T>(uninitialized("kpipe::nn::Embedding::pieces"), rows, channels)};
}

template <class T> std::int64_t scratch_bytes(std::int64_t rows, std::int64_t channels) {
  return rows * std::int64_t(sizeof(std::int64_t)) + rows * channels * std::int64_t(sizeof(T));
}

// dout[B*T, C] -> dtoken[V, C] +=, dposition[T_max, C] +=
template <class T, class A, KernelPath P>
void backward_weight(const ExecSpace& space, const Embedding<T, A>& emb, const View1<const Token>& tokens, int seq,
                     In2<A> dout, const EmbeddingScratch<T>& scratch) {
  check_sequences(tokens.extent(0), seq, emb.position.extent(0));
  const auto dtoken = emb.dtoken;
  const auto dposition = emb.dposition;
  const std::int64_t rows = dout.extent(0);
  const std::int64_t sequences = rows / seq;
  const std::int64_t channels = dout.extent(1);
  const Token vocab = Token(dtoken.extent(0));
  require(std::int64_t(scratch.order.extent(0)) >= rows && std::int64_t(scratch.pieces.extent(0)) >= rows &&
              std::int64_t(scratch.pieces.extent(1)) == channels,
          "nn::Embedding: the scratch is [{}] and [{}, {}], {} rows of {} channels need it", scratch.order.extent(0),
          scratch.pieces.extent(0), scratch.pieces.extent(1), rows, channels);
  // A token may occur on many rows. The rows are sorted by (token, row): key token * rows + row, and out-of-range
  // ids after every valid one (vocab * rows + row). The sorted positions are cut at every token change and every
  // multiple of `piece`: one work item per piece and block of channels (one channel on a GPU, a run of neighbouring
  // channels on a CPU, see core/elementwise.hpp) sums the piece's rows in order, then one per token and block adds
  // its pieces in order to the gradient. No two work items write the same element (no atomics), the sums are the
  // same whatever the block, and no item walks more than `piece` rows or pieces.
  const View1<std::int64_t> keys(scratch.order.data(), rows);
  const View2<T> pieces = scratch.pieces;
  Kokkos::parallel_for("kpipe::nn::Embedding::backward_weight::keys", range(space, rows),
                       KOKKOS_LAMBDA(std::int64_t i) {
                         const Token t = tokens(i);
                         keys(i) = std::int64_t(valid_token(t, vocab) ? t : vocab) * rows + i;
                       });
  sort_unique_keys(space, keys);
  constexpr int width = column_block<P>;
  constexpr std::int64_t piece = embedding_piece_rows;
  const std::int64_t blocks = (channels + width - 1) / width;
  Kokkos::parallel_for("kpipe::nn::Embedding::backward_weight::pieces", range2(space, rows, blocks),
                       KOKKOS_LAMBDA(std::int64_t p, std::int64_t block) {
                         const std::int64_t t = keys(p) / rows;
                         if (t >= vocab || (p % piece != 0 && keys(p - 1) / rows == t)) return;  // inside a piece
                         const std::int64_t c0 = block * width, end = math::min(rows, (p / piece + 1) * piece);
                         const int n = channels - c0 < width ? int(channels - c0) : width;
                         T sum[width];
                         for (int j = 0; j < width; ++j) sum[j] = T(0);
                         for (std::int64_t q = p; q < end && keys(q) / rows == t; ++q) {
                           const A* KOKKOS_RESTRICT source = &dout(keys(q) - t * rows, c0);
                           for (int j = 0; j < n; ++j) sum[j] += widen<T>(source[j]);
                         }
                         T* KOKKOS_RESTRICT target = &pieces(p, c0);
                         for (int j = 0; j < n; ++j) target[j] = sum[j];
                       });
  Kokkos::parallel_for("kpipe::nn::Embedding::backward_weight::token", range2(space, rows, blocks),
                       KOKKOS_LAMBDA(std::int64_t p, std::int64_t block) {
                         const std::int64_t t = keys(p) / rows;
                         if (t >= vocab || (p > 0 && keys(p - 1) / rows == t)) return;  // not a token's first row
                         const std::int64_t c0 = block * width;
                         const int n = channels - c0 < width ? int(channels - c0) : width;
                         T sum[width];
                         for (int j = 0; j < width; ++j) sum[j] = j < n ? pieces(p, c0 + j) : T(0);
                         for (std::int64_t q = (p / piece + 1) * piece; q < rows && keys(q) / rows == t; q += piece)
                           for (int j = 0; j < n; ++j) sum[j] += pieces(q, c0 + j);
                         T* KOKKOS_RESTRICT target = &dtoken(t, c0);
                         for (int j = 0; j < n; ++j) target[j] += sum[j];
                       });
  // Position t is on row b*T + t of every sequence b: one thread per (t, c) sums them in order.
  Kokkos::parallel_for("kpipe::nn::Embedding::backward_weight::position", range2(space, seq, dout.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t t, std::int64_t c) {
                         T sum = 0;
                         for (std::int64_t b = 0; b < sequences; ++b) sum += widen<T>(dout(b * seq + t, c));
                         dposition(t, c) += sum;
                       });
}

#define KPIPE_INSTANTIATE_KERNEL(T, A, P)                                                                             \
  template void backward_weight<T, A, P>(const ExecSpace&, const Embedding<T, A>&, const View1<const Token>&, int,    \
                                         In2<A>, const EmbeddingScratch<T>&);
#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template void forward(const ExecSpace&, const Embedding<T, A>&, const View1<const Token>&, int, const View2<A>&);
#define KPIPE_INSTANTIATE_ACCUMULATION(T) template EmbeddingScratch<T> allocate_scratch<T>(std::int64_t, std::int64_t);
// The scratch size only the memory plan asks (model::chunk_bytes): at the training precisions.
#define KPIPE_INSTANTIATE_TRAINING_ACCUMULATION(T) template std::int64_t scratch_bytes<T>(std::int64_t, std::int64_t);
KPIPE_CHECKED_KERNELS(KPIPE_INSTANTIATE_KERNEL)
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
KPIPE_CHECKED_ACCUMULATIONS(KPIPE_INSTANTIATE_ACCUMULATION)
KPIPE_TRAINING_ACCUMULATIONS(KPIPE_INSTANTIATE_TRAINING_ACCUMULATION)
#undef KPIPE_INSTANTIATE_KERNEL
#undef KPIPE_INSTANTIATE
#undef KPIPE_INSTANTIATE_ACCUMULATION
#undef KPIPE_INSTANTIATE_TRAINING_ACCUMULATION

}  // namespace kpipe::nn
