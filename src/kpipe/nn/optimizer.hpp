#pragma once
// Optimizers over a flat parameter buffer (a stage's parameters are one allocation, see ParameterStore).
// One kernel per update; the gradient clipping factor is folded into it so that gradients are read once.
#include <cstdint>
#include <string>

#include "kpipe/core/config.hpp"
#include "kpipe/core/rounded_copy.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/nn/views.hpp"

namespace kpipe::nn {


// Learning rate at optimizer step `step` (0-based): linear warm-up, then cosine to min_lr, then min_lr.
double learning_rate(const OptimizerConfig& cfg, std::int64_t step, std::int64_t total_steps);

// Multiplier applied to gradients so that their global norm is at most max_norm (1 when disabled).
double clip_factor(double global_norm, double max_norm);

// Sum of squares of x, accumulated in double (a stage sums these per layer, in global layer order, so that
// the global norm does not depend on the partition). The first waits for the result; the second queues it
// into a device scalar (the same sums, so the same bits), for callers that copy many of them out at once.
template <class T, KernelPath P = default_kernel_path> double sum_squares(const ExecSpace& space, In1<T> x);
template <class T, KernelPath P = default_kernel_path>
void sum_squares(const ExecSpace& space, In1<T> x, const Kokkos::View<double, MemSpace>& into);

// One AdamW step (decoupled weight decay, bias correction), step is 1-based:
//   g = grad_scale * grads; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; m^ = m / (1-b1^step)
//   params -= lr * d / (sqrt(v / (1-b2^step)) + eps) + lr * wd * decay_mask * params
// where d = m^, or with a look-ahead L (steps after the first) d = m^ + L (m^ - the step before's m^): the
// moment extrapolated L steps on, which an update whose gradient is L steps stale applies instead
// (runtime/async_rules.hpp). L = 0 is the plain step, bit for bit.
template <class T, KernelPath P = default_kernel_path>
void adamw_update(const ExecSpace& space, const OptimizerConfig& cfg, double lr, std::int64_t step, double grad_scale,
                  const View1<T>& params, In1<T> grads, const View1<T>& m, const View1<T>& v,
                  const View1<const std::uint8_t>& decay_mask, double lookahead = 0);

// The same AdamW step in the one pass an update per micro-batch wants (PipeDream's, runtime/async_rules.hpp):
// the new weights written into `into` from the weights `from` (the same buffer, or another one of the same
// length, which is left as it was: the next weight version's), and the gradients left zero as they are read.
// Element for element the arithmetic of adamw_update (look-ahead included), so the bits are the same.
// With a rounded copy (float weights only), the same kernel writes the new weights' bf16 compute copy too, as
// ParameterStore::refresh_compute_copy would (each rounded once from the value just written): no pass of
// its own.
template <class T, KernelPath P = default_kernel_path>
void adamw_update_into(const ExecSpace& space, const OptimizerConfig& cfg, double lr, std::int64_t step,
                       double grad_scale, In1<T> from, const View1<T>& into, const View1<T>& grads, const View1<T>& m,
                       const View1<T>& v, const View1<const std::uint8_t>& decay_mask, double lookahead = 0,
                       const RoundedCopy& rounded = {});

// One SGD step with momentum: g = grad_scale * grads + wd * decay_mask * params; buf = momentum buf + g;
// params -= lr * d, d = buf, or with a look-ahead L, d = buf + L (buf - the buffer before this step).
template <class T>
void sgd_update(const ExecSpace& space, const OptimizerConfig& cfg, double lr, double grad_scale,
                const View1<T>& params, In1<T> grads, const View1<T>& momentum_buf,
                const View1<const std::uint8_t>& decay_mask, double lookahead = 0);

// The same SGD step from `from` into `into`, the gradients left zero and the compute copy written (as
// adamw_update_into).
template <class T>
void sgd_update_into(const ExecSpace& space, const OptimizerConfig& cfg, double lr, double grad_scale, In1<T> from,
                     const View1<T>& into, const View1<T>& grads, const View1<T>& momentum_buf,
                     const View1<const std::uint8_t>& decay_mask, double lookahead = 0,
                     const RoundedCopy& rounded = {});

}  // namespace kpipe::nn
