#pragma once
// How a layer's matrix products run (core/blas.hpp): the math mode of float products and, for
// mixed-precision layers (storage A = bf16, accumulation T = float), the scratch their products use. One
// scratch serves every layer of a chunk (each call overwrites it), sized by the largest product it serves.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kpipe/core/blas.hpp"
#include "kpipe/core/tensor.hpp"

namespace kpipe::nn {

template <class T> struct Products {
  blas::Math math = blas::Math::exact;
  View1<T> accumulator;     // a product in T before its epilogue (bias, residual) rounds it once to A
  View1<float> workspace;   // blas::gemm's, for bf16 operands on host builds
};

// Elements a set of products needs in each scratch buffer.
struct ProductsSize {
  std::int64_t accumulator = 0, workspace = 0;
  // The larger of this and other, buffer by buffer: one scratch serving both.
  ProductsSize& cover(const ProductsSize& other) {
    accumulator = std::max(accumulator, other.accumulator);
    workspace = std::max(workspace, other.workspace);
    return *this;
  }
  std::int64_t bytes(std::size_t t_bytes) const {
    return accumulator * std::int64_t(t_bytes) + workspace * std::int64_t(sizeof(float));
  }
};

// The scratch of a ProductsSize (empty views where it needs none), labelled, uninitialized.
template <class T> Products<T> allocate_products(const ProductsSize& size, blas::Math math = blas::Math::exact) {
  Products<T> p;
  p.math = math;
  if (size.accumulator > 0)
    p.accumulator = View1<T>(uninitialized("kpipe::nn::Products::accumulator"), size.accumulator);
  if (size.workspace > 0) p.workspace = View1<float>(uninitialized("kpipe::nn::Products::workspace"), size.workspace);
  return p;
}

// The first rows x cols elements of the accumulator as a matrix (std::logic_error when it is shorter: the
// scratch was sized for other shapes).
template <class T> View2<T> accumulator(const Products<T>& p, std::int64_t rows, std::int64_t cols) {
  if (std::int64_t(p.accumulator.extent(0)) < rows * cols)
    throw std::logic_error(fmt::format("nn::Products: a [{}, {}] product in T needs an accumulator of {} elements, "
                                       "got {}", rows, cols, rows * cols, p.accumulator.extent(0)));
  return View2<T>(p.accumulator.data(), rows, cols);
}

}  // namespace kpipe::nn
