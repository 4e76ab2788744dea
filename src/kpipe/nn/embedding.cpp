#include "kpipe/nn/embedding.hpp"

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"

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

// dout[B*T, C] -> dtoken[V, C] +=, dposition[T_max, C] +=
template <class T, KernelPath P, class A>
void backward_weight(const ExecSpace& space, const Embedding<T, A>& emb, const View1<const Token>& tokens, int seq,
                     In2<A> dout) {
  check_sequences(tokens.extent(0), seq, emb.position.extent(0));
  const auto dtoken = emb.dtoken;
  const auto dposition = emb.dposition;
  const std::int64_t rows = dout.extent(0);
  const std::int64_t sequences = rows / seq;
  // A token may occur on many rows: a work item owns a block of channels (one channel on a GPU, a run of
  // neighbouring channels on a CPU, see core/elementwise.hpp) and adds the rows in order, so no two work
  // items touch the same element and the sum is the same whatever the block (no atomics).
  const std::int64_t channels = dout.extent(1);
  const Token vocab = Token(dtoken.extent(0));
  constexpr int width = column_block<P>;
  Kokkos::parallel_for("kpipe::nn::Embedding::backward_weight::token", range(space, (channels + width - 1) / width),
                       KOKKOS_LAMBDA(std::int64_t block) {
                         const std::int64_t c0 = block * width;
                         const int n = channels - c0 < width ? int(channels - c0) : width;
                         for (std::int64_t i = 0; i < rows; ++i) {
                           if (!valid_token(tokens(i), vocab)) continue;
                           T* KOKKOS_RESTRICT target = &dtoken(tokens(i), c0);
                           const A* KOKKOS_RESTRICT source = &dout(i, c0);
                           for (int j = 0; j < n; ++j) target[j] += widen<T>(source[j]);
                         }
                       });
  // Position t is on row b*T + t of every sequence b: one thread per (t, c) sums them in order.
  Kokkos::parallel_for("kpipe::nn::Embedding::backward_weight::position", range2(space, seq, dout.extent(1)),
                       KOKKOS_LAMBDA(std::int64_t t, std::int64_t c) {
                         T sum = 0;
                         for (std::int64_t b = 0; b < sequences; ++b) sum += widen<T>(dout(b * seq + t, c));
                         dposition(t, c) += sum;
                       });
}

template void forward(const ExecSpace&, const Embedding<float, float>&, const View1<const Token>&, int,
                      const View2<float>&);
template void backward_weight<float, KernelPath::host, float>(const ExecSpace&, const Embedding<float, float>&,
                                                         const View1<const Token>&, int, In2<float>);
template void backward_weight<float, KernelPath::device, float>(const ExecSpace&, const Embedding<float, float>&,
                                                         const View1<const Token>&, int, In2<float>);
template void forward(const ExecSpace&, const Embedding<double, double>&, const View1<const Token>&, int,
                      const View2<double>&);
template void backward_weight<double, KernelPath::host, double>(const ExecSpace&, const Embedding<double, double>&,
                                                         const View1<const Token>&, int, In2<double>);
template void backward_weight<double, KernelPath::device, double>(const ExecSpace&, const Embedding<double, double>&,
                                                         const View1<const Token>&, int, In2<double>);
template void forward(const ExecSpace&, const Embedding<float, bf16>&, const View1<const Token>&, int,
                      const View2<bf16>&);
template void backward_weight<float, KernelPath::host, bf16>(const ExecSpace&, const Embedding<float, bf16>&,
                                                         const View1<const Token>&, int, In2<bf16>);
template void backward_weight<float, KernelPath::device, bf16>(const ExecSpace&, const Embedding<float, bf16>&,
                                                         const View1<const Token>&, int, In2<bf16>);

}  // namespace kpipe::nn
