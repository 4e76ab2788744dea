#pragma once
// The model's last layer: final LayerNorm, LM head (no bias), softmax cross-entropy against the targets.
// Its input, ln(x) and the gradients it passes on are stored in A; the logits, the losses and the loss
// gradient's arithmetic are in T (fp32 when A is bf16: a logit rounded to bf16 would be off by up to 2^-8 of
// itself, far more than the loss can take). When A is not T, dL/dlogits is rounded to A once, in a buffer of
// its own, as the operand of the head's products; when A is T it overwrites the logits in place.
#include "kpipe/nn/layernorm.hpp"
#include "kpipe/nn/linear.hpp"

namespace kpipe::nn {

template <class T, class A = T> struct Head {
  LayerNorm<T, A> ln;
  Linear<T, A> lm;  // weight [V, C], no bias
};

template <class T, class A = T> struct HeadStash {
  View2<A> h;           // [N, C] ln(x)
  View1<T> mean, rstd;  // [N]
  View2<T> logits;      // [N, V]; when A is T, backward_input turns it into dL/dlogits in place
  View1<T> losses;      // [N] per-token loss
};

template <class T, class A = T> struct HeadGrads {
  View2<A> dh;       // [N, C]
  View2<A> dlogits;  // [N, V] when A is not T (empty otherwise: dL/dlogits is stash.logits)
};

template <class T, class A> HeadStash<T, A> allocate_stash(const Head<T, A>& head, std::int64_t rows);
template <class T, class A> HeadGrads<T, A> allocate_grads(const Head<T, A>& head, std::int64_t rows);
// dL/dlogits after backward_input: grads.dlogits, or the stash's logits overwritten when A is T.
template <class T, class A> View2<const A> dlogits(const HeadStash<T, A>& stash, const HeadGrads<T, A>& grads) {
  if constexpr (mixed_precision<T, A>) {
    return grads.dlogits;
  } else {
    return stash.logits;
  }
}
// Elements of the stash (in A, in T) and of the gradients (in A) for `rows` rows of width C, vocabulary V.
struct HeadElements {
  std::int64_t a = 0, t = 0;
};
template <class T, class A> HeadElements head_stash_elements(std::int64_t rows, std::int64_t channels,
                                                             std::int64_t vocab);
template <class T, class A> std::int64_t head_grads_elements(std::int64_t rows, std::int64_t channels,
                                                             std::int64_t vocab);
// The scratch of the head's products for `rows` rows (none when A is T).
template <class T, class A> ProductsSize head_products_size(std::int64_t rows, std::int64_t channels,
                                                            std::int64_t vocab);

// (x[N, C], targets[N]) -> stash.losses[N]
template <class T, class A>
void forward(const ExecSpace& space, const Head<T, A>& head, In2<A> x, const View1<const Token>& targets,
             const HeadStash<T, A>& stash);
// scale = dL/dlosses[i] -> dx[N, C]
template <class T, class A>
void backward_input(const ExecSpace& space, const Head<T, A>& head, In2<A> x, const View1<const Token>& targets,
                    T scale, const HeadStash<T, A>& stash, const HeadGrads<T, A>& grads, const View2<A>& dx);
template <class T, class A>
void backward_weight(const ExecSpace& space, const Head<T, A>& head, In2<A> x, const HeadStash<T, A>& stash,
                     const HeadGrads<T, A>& grads);

// Sum of the per-token losses, in double, in a fixed order.
template <class T, class A> double loss_sum(const ExecSpace& space, const HeadStash<T, A>& stash);
// The same sum left in `into` (device memory) without waiting for it: a GPU's stream keeps going.
template <class T, class A>
void loss_sum(const ExecSpace& space, const HeadStash<T, A>& stash, const Kokkos::View<double, MemSpace>& into);

}  // namespace kpipe::nn
