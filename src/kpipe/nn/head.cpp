#include "kpipe/nn/head.hpp"

#include "kpipe/nn/cross_entropy.hpp"

namespace kpipe::nn {

template <class T> HeadStash<T> allocate_stash(const Head<T>& head, std::int64_t rows) {
  const auto c = head.lm.weight.extent(1), v = head.lm.weight.extent(0);
  return {View2<T>(uninitialized("kpipe::nn::Head::h"), rows, c),
          View1<T>(uninitialized("kpipe::nn::Head::mean"), rows),
          View1<T>(uninitialized("kpipe::nn::Head::rstd"), rows),
          View2<T>(uninitialized("kpipe::nn::Head::logits"), rows, v),
          View1<T>(uninitialized("kpipe::nn::Head::losses"), rows)};
}

template <class T> HeadGrads<T> allocate_grads(const Head<T>& head, std::int64_t rows) {
  return {View2<T>(uninitialized("kpipe::nn::Head::dh"), rows, head.lm.weight.extent(1))};
}

template <class T>
void forward(const ExecSpace& space, const Head<T>& head, In2<T> x, const View1<const Token>& targets,
             const HeadStash<T>& s) {
  forward(space, head.ln, x, s.h, s.mean, s.rstd);
  forward(space, head.lm, s.h, s.logits);
  cross_entropy_forward(space, s.logits, targets, s.losses);
}

template <class T>
void backward_input(const ExecSpace& space, const Head<T>& head, In2<T> x, const View1<const Token>& targets,
                    T scale, const HeadStash<T>& s, const HeadGrads<T>& g, const View2<T>& dx) {
  cross_entropy_backward_input(space, s.logits, targets, scale, s.logits);
  backward_input(space, head.lm, s.logits, g.dh);
  backward_input(space, head.ln, x, s.mean, s.rstd, g.dh, dx);
}

template <class T>
void backward_weight(const ExecSpace& space, const Head<T>& head, In2<T> x, const HeadStash<T>& s,
                     const HeadGrads<T>& g) {
  backward_weight(space, head.lm, s.h, s.logits);
  backward_weight(space, head.ln, x, s.mean, s.rstd, g.dh);
}

template <class T>
void loss_sum(const ExecSpace& space, const HeadStash<T>& s, const Kokkos::View<double, MemSpace>& into) {
  const auto losses = s.losses;
  Kokkos::parallel_reduce("kpipe::nn::Head::loss_sum", range(space, losses.extent(0)),
                          KOKKOS_LAMBDA(std::int64_t i, double& acc) { acc += double(losses(i)); }, into);
}

template <class T> double loss_sum(const ExecSpace& space, const HeadStash<T>& s) {
  const Kokkos::View<double, MemSpace> sum("kpipe::nn::Head::loss_sum");
  loss_sum(space, s, sum);
  double result = 0;
  Kokkos::deep_copy(result, sum);  // waits for the reduction
  return result;
}

template HeadStash<float> allocate_stash(const Head<float>&, std::int64_t);
template HeadGrads<float> allocate_grads(const Head<float>&, std::int64_t);
template void forward(const ExecSpace&, const Head<float>&, In2<float>, const View1<const Token>&,
                      const HeadStash<float>&);
template void backward_input(const ExecSpace&, const Head<float>&, In2<float>, const View1<const Token>&, float,
                             const HeadStash<float>&, const HeadGrads<float>&, const View2<float>&);
template void backward_weight(const ExecSpace&, const Head<float>&, In2<float>, const HeadStash<float>&,
                              const HeadGrads<float>&);
template double loss_sum(const ExecSpace&, const HeadStash<float>&);
template void loss_sum(const ExecSpace&, const HeadStash<float>&, const Kokkos::View<double, MemSpace>&);
template HeadStash<double> allocate_stash(const Head<double>&, std::int64_t);
template HeadGrads<double> allocate_grads(const Head<double>&, std::int64_t);
template void forward(const ExecSpace&, const Head<double>&, In2<double>, const View1<const Token>&,
                      const HeadStash<double>&);
template void backward_input(const ExecSpace&, const Head<double>&, In2<double>, const View1<const Token>&, double,
                             const HeadStash<double>&, const HeadGrads<double>&, const View2<double>&);
template void backward_weight(const ExecSpace&, const Head<double>&, In2<double>, const HeadStash<double>&,
                              const HeadGrads<double>&);
template double loss_sum(const ExecSpace&, const HeadStash<double>&);
template void loss_sum(const ExecSpace&, const HeadStash<double>&, const Kokkos::View<double, MemSpace>&);

}  // namespace kpipe::nn
