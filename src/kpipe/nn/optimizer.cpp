#include "kpipe/nn/optimizer.hpp"

#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::nn {

double learning_rate(const OptimizerConfig& cfg, std::int64_t step, std::int64_t total_steps) {
  require(cfg.warmup_steps >= 0, "optim.warmup_steps = {} must be >= 0", cfg.warmup_steps);
  require(cfg.decay_steps >= 0, "optim.decay_steps = {} must be >= 0", cfg.decay_steps);
  if (step < cfg.warmup_steps) return cfg.lr * double(step + 1) / cfg.warmup_steps;
  const std::int64_t decay = cfg.decay_steps > 0 ? cfg.decay_steps : total_steps - cfg.warmup_steps;
  const std::int64_t since_warmup = step - cfg.warmup_steps;
  if (since_warmup >= decay) return cfg.min_lr;
  const double pi = 3.14159265358979323846;
  const double progress = double(since_warmup) / double(decay);
  return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + std::cos(pi * progress));
}

double clip_factor(double global_norm, double max_norm) {
  // The 1e-6 keeps the clipped norm just under max_norm (as torch.nn.utils.clip_grad_norm_ does).
  return max_norm > 0 && global_norm > max_norm ? max_norm / (global_norm + 1e-6) : 1.0;
}

namespace {
// The one reduction both sum_squares run: into a host double (waits) or a device scalar (queued).
template <class T, KernelPath P, class Result>
void reduce_squares(const ExecSpace& space, const View1<const T>& x, Result&& result) {
  if constexpr (P == KernelPath::host) {
    // Blocks of contiguous elements, each a vectorized lane sum in double; blocks added in order.
    const std::int64_t n = x.extent(0), block = elementwise_block<P>;
    const T* const data = x.data();
    Kokkos::parallel_reduce(
        "kpipe::nn::sum_squares", range(space, (n + block - 1) / block),
        KOKKOS_LAMBDA(std::int64_t b, double& s) {
          const T* KOKKOS_RESTRICT p = data + b * block;
          const std::int64_t len = n - b * block < block ? n - b * block : block;
          s += lane_sum<double>(len, [&](std::int64_t j) {
            const double v = p[j];
            return v * v;
          });
        },
        result);
  } else {
    Kokkos::parallel_reduce(
        "kpipe::nn::sum_squares", range(space, x.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i, double& s) {
          const double v = x(i);
          s += v * v;
        },
        result);
  }
}
}  // namespace

template <class T, KernelPath P> double sum_squares(const ExecSpace& space, In1<T> x) {
  double total = 0;
  reduce_squares<T, P>(space, x, total);
  return total;
}

template <class T, KernelPath P>
void sum_squares(const ExecSpace& space, In1<T> x, const Kokkos::View<double, MemSpace>& into) {
  reduce_squares<T, P>(space, x, into);
}

// The optimizer state and the mask must cover the parameter buffer exactly; anything else is a bug in the
// caller, not bad input.
static void check_lengths(const char* what, std::size_t params, std::size_t grads, std::size_t state_a,
                          std::size_t state_b, std::size_t mask) {
  if (grads != params || state_a != params || state_b != params || mask != params)
    throw std::invalid_argument(fmt::format("{}: lengths differ: params {}, grads {}, state {} and {}, mask {}",
                                            what, params, grads, state_a, state_b, mask));
}

namespace {

// AdamW's scalars of one step: computed once, in double, on the host, then rounded to T.
template <class T> struct AdamwScalars {
  T b1, b2, eps, scale, rate, inv_bias1, inv_bias2, decay;
  // The look-ahead L and the previous step's bias correction; off at the first step (no moment before it).
  bool ahead;
  T look, inv_bias1_before;
};

template <class T>
AdamwScalars<T> adamw_scalars(const OptimizerConfig& cfg, double lr, std::int64_t step, double grad_scale,
                              double lookahead) {
  if (step < 1) throw std::invalid_argument(fmt::format("adamw_update: step = {} (steps count from 1)", step));
  require(cfg.beta1 >= 0 && cfg.beta1 < 1, "optim.beta1 = {} must be in [0, 1)", cfg.beta1);
  require(cfg.beta2 >= 0 && cfg.beta2 < 1, "optim.beta2 = {} must be in [0, 1)", cfg.beta2);
  require(cfg.eps > 0, "optim.eps = {} must be > 0", cfg.eps);
  const bool ahead = lookahead != 0 && step > 1;
  return {T(cfg.beta1),
          T(cfg.beta2),
          T(cfg.eps),
          T(grad_scale),
          T(lr),
          T(1.0 / (1.0 - std::pow(cfg.beta1, double(step)))),
          T(1.0 / (1.0 - std::pow(cfg.beta2, double(step)))),
          T(lr * cfg.weight_decay),
          ahead,
          T(lookahead),
          ahead ? T(1.0 / (1.0 - std::pow(cfg.beta1, double(step - 1)))) : T(0)};
}

// One element's AdamW step: m and v move on, the new weight is returned. Every AdamW kernel calls this, so
// that they round alike. Ahead is s.ahead, a template parameter so that the loops have no branch in them.
template <bool Ahead, class T>
KOKKOS_INLINE_FUNCTION T adamw_step(const AdamwScalars<T>& s, T grad, T& m, T& v, T p, std::uint8_t decays) {
  const T g = s.scale * grad;
  const T m_old = m;
  m = s.b1 * m_old + (T(1) - s.b1) * g;
  v = s.b2 * v + (T(1) - s.b2) * g * g;
  T m_hat = m * s.inv_bias1;
  if constexpr (Ahead) m_hat += s.look * (m_hat - m_old * s.inv_bias1_before);
  const T adam_step = s.rate * m_hat / (math::sqrt(v * s.inv_bias2) + s.eps);
  return p - (adam_step + s.decay * T(decays) * p);
}

// One AdamW pass over elements [begin, end). Apart: the weights are read from fp and written to tp (apart from
// it), else read and written in tp (fp unused). The buffers are restrict parameters, not local pointers: GCC
// honours restrict only on parameters, and without it the apart loop needs more run-time alias checks than
// GCC emits (it then stays scalar, four times slower). G is T to zero the gradients as they are read, const
// T to leave them.
template <bool Ahead, bool Apart, class T, class G>
KOKKOS_INLINE_FUNCTION void adamw_block(const AdamwScalars<T>& s, std::int64_t begin, std::int64_t end,
                                        const T* KOKKOS_RESTRICT fp, T* KOKKOS_RESTRICT tp, G* KOKKOS_RESTRICT gp,
                                        T* KOKKOS_RESTRICT mp, T* KOKKOS_RESTRICT vp,
                                        const std::uint8_t* KOKKOS_RESTRICT mask) {
  for (std::int64_t i = begin; i < end; ++i) {
    T mi = mp[i], vi = vp[i];
    tp[i] = adamw_step<Ahead>(s, gp[i], mi, vi, Apart ? fp[i] : tp[i], mask[i]);
    mp[i] = mi;
    vp[i] = vi;
    if constexpr (!std::is_const_v<G>) gp[i] = T(0);
  }
}

// The block's new weights rounded into their compute copy, while they are at hand (mixed precision only: the
// copy is bf16 of float weights; there is none otherwise).
template <class T>
KOKKOS_INLINE_FUNCTION void round_block(const RoundedCopy& rounded, const T* weights, std::int64_t begin,
                                        std::int64_t end) {
  if constexpr (std::is_same_v<T, float>) {
    if (!rounded.empty()) round_range(rounded, weights, begin, end);
  } else {
    (void)rounded, (void)weights, (void)begin, (void)end;
  }
}

template <bool Ahead, bool Apart, KernelPath P, class T, class G>
void adamw_pass(const char* label, const ExecSpace& space, const AdamwScalars<T>& s, const View1<const T>& from,
                const View1<T>& into, const View1<G>& grads, const View1<T>& m,
                const View1<T>& v, const View1<const std::uint8_t>& decay_mask, const RoundedCopy& rounded) {
  for_each_block<P>(label, space, std::int64_t(into.extent(0)), KOKKOS_LAMBDA(std::int64_t begin, std::int64_t end) {
    adamw_block<Ahead, Apart>(s, begin, end, Apart ? from.data() : nullptr, into.data(), grads.data(), m.data(),
                              v.data(), decay_mask.data());
    round_block(rounded, into.data(), begin, end);
  });
}

template <KernelPath P, class T, class G>
void adamw_passes(const char* label, const ExecSpace& space, const AdamwScalars<T>& s, const View1<const T>& from,
                  const View1<T>& into, const G& grads, const View1<T>& m, const View1<T>& v,
                  const View1<const std::uint8_t>& decay_mask, const RoundedCopy& rounded = {}) {
  const bool apart = from.data() != into.data();
  if (s.ahead && apart) adamw_pass<true, true, P, T>(label, space, s, from, into, grads, m, v, decay_mask, rounded);
  if (s.ahead && !apart) adamw_pass<true, false, P, T>(label, space, s, from, into, grads, m, v, decay_mask, rounded);
  if (!s.ahead && apart) adamw_pass<false, true, P, T>(label, space, s, from, into, grads, m, v, decay_mask, rounded);
  if (!s.ahead && !apart) adamw_pass<false, false, P, T>(label, space, s, from, into, grads, m, v, decay_mask, rounded);
}

// SGD's scalars and one element's step (every SGD kernel calls it).
template <class T> struct SgdScalars {
  T momentum, weight_decay, scale, rate;
  bool ahead;
  T look;
};

template <class T> SgdScalars<T> sgd_scalars(const OptimizerConfig& cfg, double lr, double grad_scale, double lookahead) {
  return {T(cfg.momentum), T(cfg.weight_decay), T(grad_scale), T(lr), lookahead != 0, T(lookahead)};
}

template <class T>
KOKKOS_INLINE_FUNCTION T sgd_step(const SgdScalars<T>& s, T grad, T& buf, T p, std::uint8_t decays) {
  const T g = s.scale * grad + s.weight_decay * T(decays) * p;
  const T before = buf;
  buf = s.momentum * before + g;
  return p - s.rate * (s.ahead ? buf + s.look * (buf - before) : buf);
}

// `into` is `from` or lies apart from it: a partial overlap would read weights already written.
template <class T> void check_apart(const char* what, const View1<const T>& from, const View1<T>& into) {
  if (from.extent(0) != into.extent(0))
    throw std::invalid_argument(fmt::format("{}: from has {} elements, into {}", what, from.extent(0), into.extent(0)));
  const T* a = from.data();
  const T* b = into.data();
  const std::size_t n = from.extent(0);
  if (a != b && a < b + n && b < a + n) throw std::invalid_argument(fmt::format("{}: from and into overlap", what));
}

// A rounded copy is of float weights, with a table of one start more than segments. (That the table covers
// the buffer is the store's to ensure, model/parameters.cpp: its last start is on the device.)
template <class T> void check_rounded(const char* what, const RoundedCopy& rounded) {
  if (rounded.empty()) return;
  if (!std::is_same_v<T, float>) throw std::invalid_argument(fmt::format("{}: a bf16 copy of weights not in float", what));
  const std::size_t segments = rounded.offsets.extent(0);
  if (rounded.starts.extent(0) != segments + 1 || segments == 0)
    throw std::invalid_argument(fmt::format("{}: a segment table of {} starts for {} segments", what,
                                            rounded.starts.extent(0), segments));
}

}  // namespace

template <class T, KernelPath P>
void adamw_update(const ExecSpace& space, const OptimizerConfig& cfg, double lr, std::int64_t step, double grad_scale,
                  const View1<T>& params, In1<T> grads, const View1<T>& m, const View1<T>& v,
                  const View1<const std::uint8_t>& decay_mask, double lookahead) {
  check_lengths("adamw_update", params.extent(0), grads.extent(0), m.extent(0), v.extent(0), decay_mask.extent(0));
  const AdamwScalars<T> s = adamw_scalars<T>(cfg, lr, step, grad_scale, lookahead);
  adamw_passes<P, T>("kpipe::nn::adamw_update", space, s, params, params, grads, m, v, decay_mask);
}

template <class T, KernelPath P>
void adamw_update_into(const ExecSpace& space, const OptimizerConfig& cfg, double lr, std::int64_t step,
                       double grad_scale, In1<T> from, const View1<T>& into, const View1<T>& grads, const View1<T>& m,
                       const View1<T>& v, const View1<const std::uint8_t>& decay_mask, double lookahead,
                       const RoundedCopy& rounded) {
  check_lengths("adamw_update_into", into.extent(0), grads.extent(0), m.extent(0), v.extent(0), decay_mask.extent(0));
  check_apart("adamw_update_into", from, into);
  check_rounded<T>("adamw_update_into", rounded);
  const AdamwScalars<T> s = adamw_scalars<T>(cfg, lr, step, grad_scale, lookahead);
  adamw_passes<P, T>("kpipe::nn::adamw_update_into", space, s, from, into, grads, m, v, decay_mask, rounded);
}

template <class T>
void sgd_update(const ExecSpace& space, const OptimizerConfig& cfg, double lr, double grad_scale,
                const View1<T>& params, In1<T> grads, const View1<T>& momentum_buf,
                const View1<const std::uint8_t>& decay_mask, double lookahead) {
  check_lengths("sgd_update", params.extent(0), grads.extent(0), momentum_buf.extent(0), momentum_buf.extent(0),
                decay_mask.extent(0));
  const SgdScalars<T> s = sgd_scalars<T>(cfg, lr, grad_scale, lookahead);
  Kokkos::parallel_for("kpipe::nn::sgd_update", range(space, params.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
    T buf = momentum_buf(i);
    params(i) = sgd_step(s, grads(i), buf, params(i), decay_mask(i));
    momentum_buf(i) = buf;
  });
}

template <class T>
void sgd_update_into(const ExecSpace& space, const OptimizerConfig& cfg, double lr, double grad_scale, In1<T> from,
                     const View1<T>& into, const View1<T>& grads, const View1<T>& momentum_buf,
                     const View1<const std::uint8_t>& decay_mask, double lookahead, const RoundedCopy& rounded) {
  check_lengths("sgd_update_into", into.extent(0), grads.extent(0), momentum_buf.extent(0), momentum_buf.extent(0),
                decay_mask.extent(0));
  check_apart("sgd_update_into", from, into);
  check_rounded<T>("sgd_update_into", rounded);
  const SgdScalars<T> s = sgd_scalars<T>(cfg, lr, grad_scale, lookahead);
  const View1<const T> source = from;
  // Element i is read before it is written, so in place is fine here (no pointers promised apart). In blocks,
  // so that the compute copy is written per contiguous run; elementwise, so the same bits as one per element.
  for_each_block("kpipe::nn::sgd_update_into", space, std::int64_t(into.extent(0)),
                 KOKKOS_LAMBDA(std::int64_t begin, std::int64_t end) {
                   for (std::int64_t i = begin; i < end; ++i) {
                     T buf = momentum_buf(i);
                     into(i) = sgd_step(s, grads(i), buf, source(i), decay_mask(i));
                     momentum_buf(i) = buf;
                     grads(i) = T(0);
                   }
                   round_block(rounded, into.data(), begin, end);
                 });
}

#define KPIPE_INSTANTIATE_KERNEL(T, P)                                                                                \
  template double sum_squares<T, P>(const ExecSpace&, In1<T>);                                                        \
  template void sum_squares<T, P>(const ExecSpace&, In1<T>, const Kokkos::View<double, MemSpace>&);                   \
  template void adamw_update<T, P>(const ExecSpace&, const OptimizerConfig&, double, std::int64_t, double,            \
                                   const View1<T>&, In1<T>, const View1<T>&, const View1<T>&,                         \
                                   const View1<const std::uint8_t>&, double);                                         \
  template void adamw_update_into<T, P>(const ExecSpace&, const OptimizerConfig&, double, std::int64_t, double,       \
                                        In1<T>, const View1<T>&, const View1<T>&, const View1<T>&, const View1<T>&,   \
                                        const View1<const std::uint8_t>&, double, const RoundedCopy&);
#define KPIPE_INSTANTIATE(T)                                                                                          \
  template void sgd_update(const ExecSpace&, const OptimizerConfig&, double, double, const View1<T>&, In1<T>,         \
                           const View1<T>&, const View1<const std::uint8_t>&, double);                                \
  template void sgd_update_into(const ExecSpace&, const OptimizerConfig&, double, double, In1<T>, const View1<T>&,    \
                                const View1<T>&, const View1<T>&, const View1<const std::uint8_t>&, double,           \
                                const RoundedCopy&);
KPIPE_CHECKED_ACCUMULATION_KERNELS(KPIPE_INSTANTIATE_KERNEL)
KPIPE_CHECKED_ACCUMULATIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE_KERNEL
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::nn
