#pragma once
// The model's last layer: final LayerNorm, LM head (no bias), softmax cross-entropy against the targets.
#include "kpipe/nn/layernorm.hpp"
#include "kpipe/nn/linear.hpp"

namespace kpipe::nn {

template <class T> struct Head {
  LayerNorm<T> ln;
  Linear<T> lm;  // weight [V, C], no bias
};

template <class T> struct HeadStash {
  View2<T> h;           // [N, C] ln(x)
  View1<T> mean, rstd;  // [N]
  View2<T> logits;      // [N, V]; backward_input turns it into dL/dlogits in place
  View1<T> losses;      // [N] per-token loss
};

template <class T> struct HeadGrads {
  View2<T> dh;  // [N, C]
};

template <class T> HeadStash<T> allocate_stash(const Head<T>& head, std::int64_t rows);
template <class T> HeadGrads<T> allocate_grads(const Head<T>& head, std::int64_t rows);

// (x[N, C], targets[N]) -> stash.losses[N]
template <class T>
void forward(const ExecSpace& space, const Head<T>& head, In2<T> x, const View1<const Token>& targets,
             const HeadStash<T>& stash);
// scale = dL/dlosses[i] -> dx[N, C]
template <class T>
void backward_input(const ExecSpace& space, const Head<T>& head, In2<T> x, const View1<const Token>& targets,
                    T scale, const HeadStash<T>& stash, const HeadGrads<T>& grads, const View2<T>& dx);
template <class T>
void backward_weight(const ExecSpace& space, const Head<T>& head, In2<T> x, const HeadStash<T>& stash,
                     const HeadGrads<T>& grads);

// Sum of the per-token losses, in double, in a fixed order.
template <class T> double loss_sum(const ExecSpace& space, const HeadStash<T>& stash);
// The same sum left in `into` (device memory) without waiting for it: a GPU's stream keeps going.
template <class T>
void loss_sum(const ExecSpace& space, const HeadStash<T>& stash, const Kokkos::View<double, MemSpace>& into);

}  // namespace kpipe::nn
