#include "kpipe/nn/head.hpp"

#include "kpipe/core/precisions.hpp"
#include "kpipe/nn/cross_entropy.hpp"

namespace kpipe::nn {

template <class T, class A> HeadStash<T, A> allocate_stash(const Head<T, A>& head, std::int64_t rows) {
  const auto c = head.lm.weight.extent(1), v = head.lm.weight.extent(0);
  return {View2<A>(uninitialized("kpipe::nn::Head::h"), rows, c),
          View1<T>(uninitialized("kpipe::nn::Head::mean"), rows),
          View1<T>(uninitialized("kpipe::nn::Head::rstd"), rows),
          View2<T>(uninitialized("kpipe::nn::Head::logits"), rows, v),
          View1<T>(uninitialized("kpipe::nn::Head::losses"), rows)};
}

template <class T, class A> HeadGrads<T, A> allocate_grads(const Head<T, A>& head, std::int64_t rows) {
  HeadGrads<T, A> g;
  g.dh = View2<A>(uninitialized("kpipe::nn::Head::dh"), rows, head.lm.weight.extent(1));
  if constexpr (mixed_precision<T, A>)
    g.dlogits = View2<A>(uninitialized("kpipe::nn::Head::dlogits"), rows, head.lm.weight.extent(0));
  return g;
}

template <class T, class A>
HeadElements head_stash_elements(std::int64_t rows, std::int64_t channels, std::int64_t vocab) {
  return {rows * channels, 3 * rows + rows * vocab};  // h; mean, rstd, losses, logits
}

template <class T, class A>
std::int64_t head_grads_elements(std::int64_t rows, std::int64_t channels, std::int64_t vocab) {
  return rows * channels + (mixed_precision<T, A> ? rows * vocab : 0);  // dh, dlogits
}

template <class T, class A>
ProductsSize head_products_size(std::int64_t rows, std::int64_t channels, std::int64_t vocab) {
  ProductsSize s;
  if constexpr (mixed_precision<T, A>)  // no epilogue (the logits are the product, in T): no accumulator
    s.workspace = std::max({blas::workspace_elements<A, T>(rows, vocab, channels),   // logits = h W^T
                            blas::workspace_elements<A, A>(rows, channels, vocab),   // dh = dlogits W
                            blas::workspace_elements<A, T>(vocab, channels, rows)}); // dW += dlogits^T h
  return s;
}

template <class T, class A>
void forward(const ExecSpace& space, const Head<T, A>& head, In2<A> x, const View1<const Token>& targets,
             const HeadStash<T, A>& s) {
  forward(space, head.ln, x, s.h, s.mean, s.rstd);
  forward_product(space, head.lm, s.h, s.logits);
  cross_entropy_forward(space, s.logits, targets, s.losses);
}

template <class T, class A>
void backward_input(const ExecSpace& space, const Head<T, A>& head, In2<A> x, const View1<const Token>& targets,
                    T scale, const HeadStash<T, A>& s, const HeadGrads<T, A>& g, const View2<A>& dx) {
  if constexpr (mixed_precision<T, A>) {
    cross_entropy_backward_input(space, s.logits, targets, scale, g.dlogits);
    backward_input(space, head.lm, g.dlogits, g.dh);
  } else {
    cross_entropy_backward_input(space, s.logits, targets, scale, s.logits);
    backward_input(space, head.lm, s.logits, g.dh);
  }
  backward_input(space, head.ln, x, s.mean, s.rstd, g.dh, dx);
}

template <class T, class A>
void backward_weight(const ExecSpace& space, const Head<T, A>& head, In2<A> x, const HeadStash<T, A>& s,
                     const HeadGrads<T, A>& g) {
  backward_weight(space, head.lm, s.h, dlogits(s, g));
  backward_weight(space, head.ln, x, s.mean, s.rstd, g.dh);
}

template <class T, class A>
void loss_sum(const ExecSpace& space, const HeadStash<T, A>& s, const Kokkos::View<double, MemSpace>& into) {
  const auto losses = s.losses;
  Kokkos::parallel_reduce("kpipe::nn::Head::loss_sum", range(space, losses.extent(0)),
                          KOKKOS_LAMBDA(std::int64_t i, double& acc) { acc += double(losses(i)); }, into);
}

template <class T, class A> double loss_sum(const ExecSpace& space, const HeadStash<T, A>& s) {
  const Kokkos::View<double, MemSpace> sum("kpipe::nn::Head::loss_sum");
  loss_sum(space, s, sum);
  double result = 0;
  Kokkos::deep_copy(result, sum);  // waits for the reduction
  return result;
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template HeadStash<T, A> allocate_stash(const Head<T, A>&, std::int64_t);                                           \
  template HeadGrads<T, A> allocate_grads(const Head<T, A>&, std::int64_t);                                           \
  template ProductsSize head_products_size<T, A>(std::int64_t, std::int64_t, std::int64_t);                           \
  template void forward(const ExecSpace&, const Head<T, A>&, In2<A>, const View1<const Token>&,                       \
                        const HeadStash<T, A>&);                                                                      \
  template void backward_input(const ExecSpace&, const Head<T, A>&, In2<A>, const View1<const Token>&, T,             \
                               const HeadStash<T, A>&, const HeadGrads<T, A>&, const View2<A>&);                      \
  template void backward_weight(const ExecSpace&, const Head<T, A>&, In2<A>, const HeadStash<T, A>&,                  \
                                const HeadGrads<T, A>&);                                                              \
  template double loss_sum(const ExecSpace&, const HeadStash<T, A>&);                                                 \
  template void loss_sum(const ExecSpace&, const HeadStash<T, A>&, const Kokkos::View<double, MemSpace>&);
// The sizes only the memory plan asks (model::chunk_bytes): at the training precisions.
#define KPIPE_INSTANTIATE_TRAINING(T, A)                                                                              \
  template HeadElements head_stash_elements<T, A>(std::int64_t, std::int64_t, std::int64_t);                          \
  template std::int64_t head_grads_elements<T, A>(std::int64_t, std::int64_t, std::int64_t);
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE_TRAINING)
#undef KPIPE_INSTANTIATE
#undef KPIPE_INSTANTIATE_TRAINING

}  // namespace kpipe::nn
