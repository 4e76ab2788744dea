#include "kpipe/nn/block.hpp"

#include "kpipe/core/elementwise.hpp"
#include "kpipe/nn/gelu.hpp"

namespace kpipe::nn {

namespace {
template <class T> View2<T> matrix(const char* label, std::int64_t rows, std::int64_t cols) {
  return View2<T>(uninitialized(label), rows, cols);
}
template <class T> View1<T> vector(const char* label, std::int64_t n) { return View1<T>(uninitialized(label), n); }
}  // namespace

template <class T> BlockStash<T> allocate_stash(const Block<T>& b) {
  const auto n = b.shape.rows();
  const int c = b.shape.channels(), f = b.hidden;
  return {matrix<T>("kpipe::nn::Block::h1", n, c),   vector<T>("kpipe::nn::Block::mean1", n),
          vector<T>("kpipe::nn::Block::rstd1", n),   allocate_stash<T>(b.shape),
          matrix<T>("kpipe::nn::Block::att", n, c),  matrix<T>("kpipe::nn::Block::x2", n, c),
          matrix<T>("kpipe::nn::Block::h2", n, c),   vector<T>("kpipe::nn::Block::mean2", n),
          vector<T>("kpipe::nn::Block::rstd2", n),   matrix<T>("kpipe::nn::Block::f", n, f),
          matrix<T>("kpipe::nn::Block::g", n, f),    matrix<T>("kpipe::nn::Block::out", n, c)};
}

template <class T> BlockGrads<T> allocate_grads(const Block<T>& b) {
  const auto n = b.shape.rows();
  const int c = b.shape.channels(), f = b.hidden;
  return {matrix<T>("kpipe::nn::Block::df", n, f), matrix<T>("kpipe::nn::Block::dh2", n, c),
          matrix<T>("kpipe::nn::Block::dx2", n, c), matrix<T>("kpipe::nn::Block::dqkv", n, 3 * c),
          matrix<T>("kpipe::nn::Block::dh1", n, c)};
}

template <class T> BlockWork<T> allocate_work(const Block<T>& b) {
  const auto n = b.shape.rows();
  const int c = b.shape.channels();
  return {matrix<T>("kpipe::nn::Block::datt", n, c), allocate_work<T>(b.shape)};
}

template <class T>
void forward(const ExecSpace& space, const Block<T>& b, In2<T> x, const BlockStash<T>& s, const BlockWork<T>& w) {
  forward(space, b.ln1, x, s.h1, s.mean1, s.rstd1);
  forward(space, b.qkv, s.h1, s.attn.qkv);  // straight into the stash: attention reads its heads there
  attention_forward(space, b.shape, s.attn.qkv, s.attn, w.attn, s.att);
  forward_residual(space, b.proj, s.att, x, s.x2);
  forward(space, b.ln2, s.x2, s.h2, s.mean2, s.rstd2);
  if constexpr (host_kernels) {
    // OpenBLAS clears C in a pass of its own when beta = 0, so writing the bias first and adding the
    // product onto it (beta = 1) costs the same, and the GeLU pass then only reads f.
    forward(space, b.fc, s.h2, s.f);
    gelu_forward(space, s.f, s.g);
  } else {
    // cuBLAS writes C in the product's epilogue at beta = 0: the bias is cheapest added in the GeLU pass.
    forward_product(space, b.fc, s.h2, s.f);
    bias_gelu_forward(space, b.fc.bias, s.f, s.g);
  }
  forward_residual(space, b.fc_proj, s.g, s.x2, s.out);
}

template <class T>
void backward_input(const ExecSpace& space, const Block<T>& b, In2<T> x, const BlockStash<T>& s,
                    const BlockGrads<T>& g, const BlockWork<T>& w, In2<T> dout, const View2<T>& dx) {
  // MLP branch: dout -> dg -> df (in place) -> dh2; the residual passes dout straight to dx2.
  backward_input(space, b.fc_proj, dout, g.df);
  gelu_backward_input(space, s.f, g.df, g.df);
  backward_input(space, b.fc, g.df, g.dh2);
  Kokkos::deep_copy(space, g.dx2, dout);
  backward_input(space, b.ln2, s.x2, s.mean2, s.rstd2, g.dh2, g.dx2, /*accumulate=*/true);
  // Attention branch: dx2 -> datt -> dqkv -> dh1; the residual passes dx2 straight to dx.
  backward_input(space, b.proj, g.dx2, w.datt);
  attention_backward_input(space, b.shape, s.attn, w.attn, w.datt, g.dqkv);
  backward_input(space, b.qkv, g.dqkv, g.dh1);
  Kokkos::deep_copy(space, dx, g.dx2);
  backward_input(space, b.ln1, x, s.mean1, s.rstd1, g.dh1, dx, /*accumulate=*/true);
}

template <class T>
void backward_weight(const ExecSpace& space, const Block<T>& b, In2<T> x, const BlockStash<T>& s,
                     const BlockGrads<T>& g, In2<T> dout) {
  backward_weight(space, b.fc_proj, s.g, dout);
  backward_weight(space, b.fc, s.h2, g.df);
  backward_weight(space, b.ln2, s.x2, s.mean2, s.rstd2, g.dh2);
  backward_weight(space, b.proj, s.att, g.dx2);
  backward_weight(space, b.qkv, s.h1, g.dqkv);
  backward_weight(space, b.ln1, x, s.mean1, s.rstd1, g.dh1);
}

template BlockStash<float> allocate_stash(const Block<float>&);
template BlockGrads<float> allocate_grads(const Block<float>&);
template BlockWork<float> allocate_work(const Block<float>&);
template void forward(const ExecSpace&, const Block<float>&, In2<float>, const BlockStash<float>&,
                      const BlockWork<float>&);
template void backward_input(const ExecSpace&, const Block<float>&, In2<float>, const BlockStash<float>&,
                             const BlockGrads<float>&, const BlockWork<float>&, In2<float>, const View2<float>&);
template void backward_weight(const ExecSpace&, const Block<float>&, In2<float>, const BlockStash<float>&,
                              const BlockGrads<float>&, In2<float>);
template BlockStash<double> allocate_stash(const Block<double>&);
template BlockGrads<double> allocate_grads(const Block<double>&);
template BlockWork<double> allocate_work(const Block<double>&);
template void forward(const ExecSpace&, const Block<double>&, In2<double>, const BlockStash<double>&,
                      const BlockWork<double>&);
template void backward_input(const ExecSpace&, const Block<double>&, In2<double>, const BlockStash<double>&,
                             const BlockGrads<double>&, const BlockWork<double>&, In2<double>, const View2<double>&);
template void backward_weight(const ExecSpace&, const Block<double>&, In2<double>, const BlockStash<double>&,
                              const BlockGrads<double>&, In2<double>);

}  // namespace kpipe::nn
