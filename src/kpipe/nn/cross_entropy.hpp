#pragma once
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {

// Softmax cross-entropy over logits[N, V] with targets[N].
// losses[i] = logsumexp(logits[i]) - logits[i, targets[i]]. One pass per row, max-subtracted.
template <class T, KernelPath P = default_kernel_path>
void cross_entropy_forward(const ExecSpace& space, In2<T> logits, const View1<const Token>& targets,
                           const View1<T>& losses);
// dlogits[i] = scale * (softmax(logits[i]) - onehot(targets[i])); scale is dL/dlosses[i], the same for all
// rows (1 / tokens in the mini-batch for a mean loss). Computed in T; dlogits is stored in A (T, in place over
// logits if wanted; or bf16, rounded once, for products with bf16 operands).
template <class T, class A = T, KernelPath P = default_kernel_path>
void cross_entropy_backward_input(const ExecSpace& space, In2<T> logits, const View1<const Token>& targets, T scale,
                                  const View2<A>& dlogits);

}  // namespace kpipe::nn
