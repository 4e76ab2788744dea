#include "kpipe/nn/optimizer.hpp"

#include <cmath>
#include <stdexcept>

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/math.hpp"

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

template <class T, KernelPath P> double sum_squares(const ExecSpace& space, In1<T> x) {
  double total = 0;
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
        total);
    return total;
  }
  Kokkos::parallel_reduce(
      "kpipe::nn::sum_squares", range(space, x.extent(0)),
      KOKKOS_LAMBDA(std::int64_t i, double& s) {
        const double v = x(i);
        s += v * v;
      },
      total);
  return total;
}

// The optimizer state and the mask must cover the parameter buffer exactly; anything else is a bug in the
// caller, not bad input.
static void check_lengths(const char* what, std::size_t params, std::size_t grads, std::size_t state_a,
                          std::size_t state_b, std::size_t mask) {
  if (grads != params || state_a != params || state_b != params || mask != params)
    throw std::invalid_argument(fmt::format("{}: lengths differ: params {}, grads {}, state {} and {}, mask {}",
                                            what, params, grads, state_a, state_b, mask));
}

template <class T, KernelPath P>
void adamw_update(const ExecSpace& space, const OptimizerConfig& cfg, double lr, std::int64_t step, double grad_scale,
                  const View1<T>& params, In1<T> grads, const View1<T>& m, const View1<T>& v,
                  const View1<const std::uint8_t>& decay_mask, double lookahead) {
  check_lengths("adamw_update", params.extent(0), grads.extent(0), m.extent(0), v.extent(0), decay_mask.extent(0));
  if (step < 1) throw std::invalid_argument(fmt::format("adamw_update: step = {} (steps count from 1)", step));
  require(cfg.beta1 >= 0 && cfg.beta1 < 1, "optim.beta1 = {} must be in [0, 1)", cfg.beta1);
  require(cfg.beta2 >= 0 && cfg.beta2 < 1, "optim.beta2 = {} must be in [0, 1)", cfg.beta2);
  require(cfg.eps > 0, "optim.eps = {} must be > 0", cfg.eps);
  // Step-dependent scalars once, in double, on the host.
  const T b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps, scale = grad_scale, rate = lr;
  const T inv_bias1 = 1.0 / (1.0 - std::pow(cfg.beta1, double(step)));
  const T inv_bias2 = 1.0 / (1.0 - std::pow(cfg.beta2, double(step)));
  const T decay = lr * cfg.weight_decay;
  // The look-ahead needs the previous step's bias-corrected moment: none before the first step.
  const bool ahead = lookahead != 0 && step > 1;
  const T look = lookahead;
  const T inv_bias1_before = ahead ? T(1.0 / (1.0 - std::pow(cfg.beta1, double(step - 1)))) : T(0);
  const View1<const T> g_all = grads;
  for_each_block<P>("kpipe::nn::adamw_update", space, std::int64_t(params.extent(0)),
                 KOKKOS_LAMBDA(std::int64_t begin, std::int64_t end) {
                   T* KOKKOS_RESTRICT pp = params.data();
                   T* KOKKOS_RESTRICT mp = m.data();
                   T* KOKKOS_RESTRICT vp = v.data();
                   const T* KOKKOS_RESTRICT gp = g_all.data();
                   const std::uint8_t* KOKKOS_RESTRICT mask = decay_mask.data();
                   for (std::int64_t i = begin; i < end; ++i) {
                     const T g = scale * gp[i];
                     const T m_old = mp[i];
                     const T m_new = b1 * m_old + (T(1) - b1) * g;
                     const T v_new = b2 * vp[i] + (T(1) - b2) * g * g;
                     mp[i] = m_new;
                     vp[i] = v_new;
                     const T p = pp[i];
                     T m_hat = m_new * inv_bias1;
                     if (ahead) m_hat += look * (m_hat - m_old * inv_bias1_before);
                     const T adam_step = rate * m_hat / (math::sqrt(v_new * inv_bias2) + eps);
                     pp[i] = p - (adam_step + decay * T(mask[i]) * p);
                   }
                 });
}

template <class T>
void sgd_update(const ExecSpace& space, const OptimizerConfig& cfg, double lr, double grad_scale,
                const View1<T>& params, In1<T> grads, const View1<T>& momentum_buf,
                const View1<const std::uint8_t>& decay_mask, double lookahead) {
  check_lengths("sgd_update", params.extent(0), grads.extent(0), momentum_buf.extent(0), momentum_buf.extent(0),
                decay_mask.extent(0));
  const T momentum = cfg.momentum, wd = cfg.weight_decay, scale = grad_scale, rate = lr, look = lookahead;
  const bool ahead = lookahead != 0;
  Kokkos::parallel_for("kpipe::nn::sgd_update", range(space, params.extent(0)), KOKKOS_LAMBDA(std::int64_t i) {
    const T p = params(i);
    const T g = scale * grads(i) + wd * T(decay_mask(i)) * p;
    const T before = momentum_buf(i);
    const T buf = momentum * before + g;
    momentum_buf(i) = buf;
    params(i) = p - rate * (ahead ? buf + look * (buf - before) : buf);
  });
}

template double sum_squares<float, KernelPath::host>(const ExecSpace&, In1<float>);
template void adamw_update<float, KernelPath::host>(const ExecSpace&, const OptimizerConfig&, double, std::int64_t, double,
                                               const View1<float>&, In1<float>, const View1<float>&, const View1<float>&,
                                               const View1<const std::uint8_t>&, double);
template double sum_squares<float, KernelPath::device>(const ExecSpace&, In1<float>);
template void adamw_update<float, KernelPath::device>(const ExecSpace&, const OptimizerConfig&, double, std::int64_t, double,
                                               const View1<float>&, In1<float>, const View1<float>&, const View1<float>&,
                                               const View1<const std::uint8_t>&, double);
template void sgd_update(const ExecSpace&, const OptimizerConfig&, double, double, const View1<float>&, In1<float>,
                         const View1<float>&, const View1<const std::uint8_t>&, double);
template double sum_squares<double, KernelPath::host>(const ExecSpace&, In1<double>);
template void adamw_update<double, KernelPath::host>(const ExecSpace&, const OptimizerConfig&, double, std::int64_t, double,
                                               const View1<double>&, In1<double>, const View1<double>&, const View1<double>&,
                                               const View1<const std::uint8_t>&, double);
template double sum_squares<double, KernelPath::device>(const ExecSpace&, In1<double>);
template void adamw_update<double, KernelPath::device>(const ExecSpace&, const OptimizerConfig&, double, std::int64_t, double,
                                               const View1<double>&, In1<double>, const View1<double>&, const View1<double>&,
                                               const View1<const std::uint8_t>&, double);
template void sgd_update(const ExecSpace&, const OptimizerConfig&, double, double, const View1<double>&, In1<double>,
                         const View1<double>&, const View1<const std::uint8_t>&, double);

}  // namespace kpipe::nn
