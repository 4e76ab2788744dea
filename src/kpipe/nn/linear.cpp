#include "kpipe/nn/linear.hpp"

#include "kpipe/core/blas.hpp"
#include "kpipe/core/elementwise.hpp"

namespace kpipe::nn {

// y = residual + x W^T + b: the bias (and residual) are written first, then gemm adds the product on
// top with beta = 1, which saves a pass over y.
template <class T, KernelPath P>
void linear_into(const ExecSpace& space, const Linear<T>& layer, In2<T> x, const View2<const T>& residual,
                 const View2<T>& y) {
  const auto bias = layer.bias;
  const bool has_bias = bias.extent(0) > 0, has_residual = residual.extent(0) > 0;
  if (has_bias || has_residual) {
    for_each_row_span<P>("kpipe::nn::Linear::forward::bias", space, y.extent(0), y.extent(1),
                      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j0, std::int64_t j1) {
                        T* KOKKOS_RESTRICT out = &y(i, 0);
                        const T* KOKKOS_RESTRICT b = has_bias ? bias.data() : nullptr;
                        const T* KOKKOS_RESTRICT r = has_residual ? &residual(i, 0) : nullptr;
                        for (std::int64_t j = j0; j < j1; ++j) out[j] = (has_bias ? b[j] : T(0)) + (has_residual ? r[j] : T(0));
                      });
  }
  blas::gemm(space, "N", "T", T(1), x, layer.weight, (has_bias || has_residual) ? T(1) : T(0), y);
}

template <class T, KernelPath P>
void forward(const ExecSpace& space, const Linear<T>& layer, In2<T> x, const View2<T>& y) {
  linear_into<T, P>(space, layer, x, View2<const T>(), y);
}

template <class T>
void forward_product(const ExecSpace& space, const Linear<T>& layer, In2<T> x, const View2<T>& y) {
  blas::gemm(space, "N", "T", T(1), x, layer.weight, T(0), y);
}

template <class T, KernelPath P>
void forward_residual(const ExecSpace& space, const Linear<T>& layer, In2<T> x, In2<T> residual, const View2<T>& y) {
  linear_into<T, P>(space, layer, x, residual, y);
}

template <class T>
void backward_input(const ExecSpace& space, const Linear<T>& layer, In2<T> dy, const View2<T>& dx,
                    bool accumulate) {
  blas::gemm(space, "N", "N", T(1), dy, layer.weight, accumulate ? T(1) : T(0), dx);
}

template <class T, KernelPath P>
void backward_weight(const ExecSpace& space, const Linear<T>& layer, In2<T> x, In2<T> dy) {
  blas::gemm(space, "T", "N", T(1), dy, x, T(1), layer.dweight);
  const auto dbias = layer.dbias;
  if (dbias.extent(0) == 0) return;
  const std::int64_t rows = dy.extent(0), cols = dbias.extent(0);
  const View2<const T> g = dy;
  // Column sums, rows in a fixed order (reproducible without atomics); see core/elementwise.hpp.
  constexpr int width = column_block<P>;
  Kokkos::parallel_for("kpipe::nn::Linear::backward_weight::bias", range(space, (cols + width - 1) / width),
                       KOKKOS_LAMBDA(std::int64_t block) {
                         const std::int64_t c0 = block * width;
                         const int n = cols - c0 < width ? int(cols - c0) : width;
                         T sum[width];
                         for (int j = 0; j < width; ++j) sum[j] = 0;
                         for (std::int64_t i = 0; i < rows; ++i) {
                           const T* KOKKOS_RESTRICT row = &g(i, c0);
                           for (int j = 0; j < n; ++j) sum[j] += row[j];
                         }
                         for (int j = 0; j < n; ++j) dbias(c0 + j) += sum[j];
                       });
}

template void forward<float, KernelPath::host>(const ExecSpace&, const Linear<float>&, In2<float>, const View2<float>&);
template void forward_residual<float, KernelPath::host>(const ExecSpace&, const Linear<float>&, In2<float>, In2<float>,
                                                   const View2<float>&);
template void backward_weight<float, KernelPath::host>(const ExecSpace&, const Linear<float>&, In2<float>, In2<float>);
template void forward<float, KernelPath::device>(const ExecSpace&, const Linear<float>&, In2<float>, const View2<float>&);
template void forward_residual<float, KernelPath::device>(const ExecSpace&, const Linear<float>&, In2<float>, In2<float>,
                                                   const View2<float>&);
template void backward_weight<float, KernelPath::device>(const ExecSpace&, const Linear<float>&, In2<float>, In2<float>);
template void forward_product(const ExecSpace&, const Linear<float>&, In2<float>, const View2<float>&);
template void backward_input(const ExecSpace&, const Linear<float>&, In2<float>, const View2<float>&, bool);
template void forward<double, KernelPath::host>(const ExecSpace&, const Linear<double>&, In2<double>, const View2<double>&);
template void forward_residual<double, KernelPath::host>(const ExecSpace&, const Linear<double>&, In2<double>, In2<double>,
                                                   const View2<double>&);
template void backward_weight<double, KernelPath::host>(const ExecSpace&, const Linear<double>&, In2<double>, In2<double>);
template void forward<double, KernelPath::device>(const ExecSpace&, const Linear<double>&, In2<double>, const View2<double>&);
template void forward_residual<double, KernelPath::device>(const ExecSpace&, const Linear<double>&, In2<double>, In2<double>,
                                                   const View2<double>&);
template void backward_weight<double, KernelPath::device>(const ExecSpace&, const Linear<double>&, In2<double>, In2<double>);
template void forward_product(const ExecSpace&, const Linear<double>&, In2<double>, const View2<double>&);
template void backward_input(const ExecSpace&, const Linear<double>&, In2<double>, const View2<double>&, bool);

}  // namespace kpipe::nn
