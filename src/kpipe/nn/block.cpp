#include "kpipe/nn/block.hpp"

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/nn/gelu.hpp"

namespace kpipe::nn {

namespace {
template <class T> View2<T> matrix(const char* label, std::int64_t rows, std::int64_t cols) {
  return View2<T>(uninitialized(label), rows, cols);
}
template <class T> View1<T> vector(const char* label, std::int64_t n) { return View1<T>(uninitialized(label), n); }

template <class V> V pick(const V& a, const V& b) { return a.data() != nullptr ? a : b; }
}  // namespace

unsigned kept_fields(Recompute mode) {
  using namespace stash_field;
  switch (mode) {
    case Recompute::none: return all;
    case Recompute::attention: return all & ~(softmax | att);
    case Recompute::mlp: return all & ~(f | g);
    case Recompute::block: return out;
  }
  return all;
}

unsigned weight_fields(Recompute mode) {
  using namespace stash_field;
  // backward_weight reads h1 (qkv), att (proj), x2 and ln2's statistics (ln2), h2 (fc), g (fc_proj), and ln1's
  // statistics with the block input (ln1); q|k|v, the softmax statistics and f serve backward_input alone.
  return (ln1 | att | x2 | ln2 | g) & ~kept_fields(mode);
}

namespace {
// Elements of the given stash fields stored in A (activations) and in T (LayerNorm and softmax statistics).
struct StashElements {
  std::int64_t a = 0, t = 0;
};
StashElements stash_element_counts(unsigned fields, const AttentionShape& shape, int hidden) {
  using namespace stash_field;
  const std::int64_t n = shape.rows(), c = shape.channels(), h = hidden;
  StashElements e;
  if (fields & ln1) e.a += n * c, e.t += 2 * n;
  if (fields & qkv) e.a += 3 * n * c;
  if (fields & softmax) e.t += attention_softmax_elements(shape);
  if (fields & att) e.a += n * c;
  if (fields & x2) e.a += n * c;
  if (fields & ln2) e.a += n * c, e.t += 2 * n;
  if (fields & f) e.a += n * h;
  if (fields & g) e.a += n * h;
  if (fields & out) e.a += n * c;
  return e;
}
}  // namespace

std::int64_t stash_elements(unsigned fields, const AttentionShape& shape, int hidden) {
  const StashElements e = stash_element_counts(fields, shape, hidden);
  return e.a + e.t;
}

template <class T, class A> std::int64_t stash_bytes(unsigned fields, const AttentionShape& shape, int hidden) {
  const StashElements e = stash_element_counts(fields, shape, hidden);
  return e.a * std::int64_t(sizeof(A)) + e.t * std::int64_t(sizeof(T));
}

template <class T, class A> std::int64_t grads_bytes(const AttentionShape& shape, int hidden) {
  return grads_elements(shape, hidden) * std::int64_t(sizeof(A));
}

template <class T, class A> std::int64_t work_bytes(const AttentionShape& shape) {
  const AttentionWorkElements attn = attention_work_elements<T, A>(shape);
  return shape.rows() * shape.channels() * std::int64_t(sizeof(A)) +  // datt
         attn.t * std::int64_t(sizeof(T)) + attn.a * std::int64_t(sizeof(A)) +
         attn.workspace * std::int64_t(sizeof(float));
}

template <class T, class A> ProductsSize block_products_size(const AttentionShape& shape, int hidden) {
  const std::int64_t n = shape.rows(), c = shape.channels();
  ProductsSize s = linear_products_size<T, A>(n, c, 3 * c);  // qkv
  s.cover(linear_products_size<T, A>(n, c, c));               // proj
  s.cover(linear_products_size<T, A>(n, c, hidden));          // fc
  s.cover(linear_products_size<T, A>(n, hidden, c));          // fc_proj
  return s;
}

std::int64_t grads_elements(const AttentionShape& shape, int hidden) {
  const std::int64_t n = shape.rows(), c = shape.channels();
  return n * hidden + n * c + n * c + 3 * n * c + n * c;  // df, dh2, dx2, dqkv, dh1
}

std::int64_t work_elements(const AttentionShape& shape) {
  const AttentionWorkElements attn = attention_work_elements<double, double>(shape);
  return shape.rows() * shape.channels() + attn.t + attn.a;
}

template <class T, class A> BlockStash<T, A> allocate_stash(const Block<T, A>& b, unsigned fields) {
  using namespace stash_field;
  const auto n = b.shape.rows();
  const int c = b.shape.channels(), f_width = b.hidden;
  BlockStash<T, A> s;
  if (fields & ln1) {
    s.h1 = matrix<A>("kpipe::nn::Block::h1", n, c);
    s.mean1 = vector<T>("kpipe::nn::Block::mean1", n);
    s.rstd1 = vector<T>("kpipe::nn::Block::rstd1", n);
  }
  if (fields & (qkv | softmax)) s.attn = allocate_stash<T, A>(b.shape, (fields & qkv) != 0, (fields & softmax) != 0);
  if (fields & att) s.att = matrix<A>("kpipe::nn::Block::att", n, c);
  if (fields & x2) s.x2 = matrix<A>("kpipe::nn::Block::x2", n, c);
  if (fields & ln2) {
    s.h2 = matrix<A>("kpipe::nn::Block::h2", n, c);
    s.mean2 = vector<T>("kpipe::nn::Block::mean2", n);
    s.rstd2 = vector<T>("kpipe::nn::Block::rstd2", n);
  }
  if (fields & f) s.f = matrix<A>("kpipe::nn::Block::f", n, f_width);
  if (fields & g) s.g = matrix<A>("kpipe::nn::Block::g", n, f_width);
  if (fields & out) s.out = matrix<A>("kpipe::nn::Block::out", n, c);
  return s;
}

template <class T, class A> BlockStash<T, A> overlay(const BlockStash<T, A>& a, const BlockStash<T, A>& b) {
  BlockStash<T, A> s;
  s.h1 = pick(a.h1, b.h1);
  s.mean1 = pick(a.mean1, b.mean1);
  s.rstd1 = pick(a.rstd1, b.rstd1);
  s.attn.qkv = pick(a.attn.qkv, b.attn.qkv);
  s.attn.softmax = pick(a.attn.softmax, b.attn.softmax);
  s.att = pick(a.att, b.att);
  s.x2 = pick(a.x2, b.x2);
  s.h2 = pick(a.h2, b.h2);
  s.mean2 = pick(a.mean2, b.mean2);
  s.rstd2 = pick(a.rstd2, b.rstd2);
  s.f = pick(a.f, b.f);
  s.g = pick(a.g, b.g);
  s.out = pick(a.out, b.out);
  return s;
}

template <class T, class A> BlockGrads<T, A> allocate_grads(const Block<T, A>& b) {
  const auto n = b.shape.rows();
  const int c = b.shape.channels(), f = b.hidden;
  return {matrix<A>("kpipe::nn::Block::df", n, f), matrix<A>("kpipe::nn::Block::dh2", n, c),
          matrix<A>("kpipe::nn::Block::dx2", n, c), matrix<A>("kpipe::nn::Block::dqkv", n, 3 * c),
          matrix<A>("kpipe::nn::Block::dh1", n, c)};
}

template <class T, class A> BlockWork<T, A> allocate_work(const Block<T, A>& b) {
  const auto n = b.shape.rows();
  const int c = b.shape.channels();
  return {matrix<A>("kpipe::nn::Block::datt", n, c), allocate_work<T, A>(b.shape)};
}

// The forward in its parts; recompute runs the parts that produce what a mode drops, so a recomputed
// activation comes from the very kernels, inputs and order that produced it the first time.

namespace block_detail {

// x -> h1, q|k|v, softmax statistics, att, x2 = x + proj(att), h2 = ln2(x2)
template <class T, class A>
void attention_half(const ExecSpace& space, const Block<T, A>& b, In2<A> x, const BlockStash<T, A>& s,
                    const BlockWork<T, A>& w) {
  forward(space, b.ln1, x, s.h1, s.mean1, s.rstd1);
  forward(space, b.qkv, s.h1, s.attn.qkv);  // straight into the stash: attention reads its heads there
  attention_forward(space, b.shape, s.attn.qkv, s.attn, w.attn, s.att);
  if constexpr (mixed_precision<T, A>) {
    // The product in T, then the residual's add and ln2 in one pass over each row (Linear's epilogue would
    // have been a pass of its own, and ln2 another over x2).
    const View2<T> product = accumulator(b.proj.products, s.x2.extent(0), s.x2.extent(1));
    forward_product(space, b.proj, s.att, product);
    add_residual_forward(space, b.ln2, product, b.proj.bias, x, s.x2, s.h2, s.mean2, s.rstd2);
  } else {
    // Here the product is added onto bias + residual (beta 1): no pass of its own to fold ln2 into.
    forward_residual(space, b.proj, s.att, x, s.x2);
    forward(space, b.ln2, s.x2, s.h2, s.mean2, s.rstd2);
  }
}

// h2 -> f, g
template <class T, class A> void mlp_activation(const ExecSpace& space, const Block<T, A>& b, const BlockStash<T,
                                                A>& s) {
  if constexpr (mixed_precision<T, A>) {
    // The product in T, then f = product + bias and g = GeLU(f) from the same T value, each rounded once.
    const View2<T> product = accumulator(b.fc.products, s.f.extent(0), s.f.extent(1));
    forward_product(space, b.fc, s.h2, product);
    bias_gelu_forward<T>(space, b.fc.bias, product, s.f, s.g);
  } else if constexpr (host_kernels) {
    // OpenBLAS clears C in a pass of its own when beta = 0, so writing the bias first and adding the
    // product onto it (beta = 1) costs the same, and the GeLU pass then only reads f.
    forward(space, b.fc, s.h2, s.f);
    gelu_forward(space, s.f, s.g);
  } else {
    // cuBLAS writes C in the product's epilogue at beta = 0: the bias is cheapest added in the GeLU pass.
    forward_product(space, b.fc, s.h2, s.f);
    bias_gelu_forward(space, b.fc.bias, s.f, s.g);
  }
}

}  // namespace block_detail

template <class T, class A>
void forward(const ExecSpace& space, const Block<T, A>& b, In2<A> x, const BlockStash<T, A>& s,
             const BlockWork<T, A>& w) {
  using namespace block_detail;
  attention_half(space, b, x, s, w);
  mlp_activation(space, b, s);
  forward_residual(space, b.fc_proj, s.g, s.x2, s.out);
}

template <class T, class A>
void recompute(const ExecSpace& space, const Block<T, A>& b, Recompute mode, In2<A> x, const BlockStash<T, A>& s,
               const BlockWork<T, A>& w) {
  using namespace block_detail;
  switch (mode) {
    case Recompute::none: return;
    case Recompute::attention:
      attention_forward(space, b.shape, s.attn.qkv, s.attn, w.attn, s.att);
      return;
    case Recompute::mlp:
      mlp_activation(space, b, s);
      return;
    case Recompute::block:  // everything but the output, which is kept
      attention_half(space, b, x, s, w);
      mlp_activation(space, b, s);
      return;
  }
}

template <class T, class A>
void backward_input(const ExecSpace& space, const Block<T, A>& b, In2<A> x, const BlockStash<T, A>& s,
                    const BlockGrads<T, A>& g, const BlockWork<T, A>& w, In2<A> dout, const View2<A>& dx) {
  // MLP branch: dout -> dg -> df (in place) -> dh2; the residual passes dout straight to dx2, which the
  // LayerNorm's backward adds as it writes dx2 (no copy of dout first).
  backward_input(space, b.fc_proj, dout, g.df);
  gelu_backward_input(space, s.f, g.df, g.df);
  backward_input(space, b.fc, g.df, g.dh2);
  backward_input(space, b.ln2, s.x2, s.mean2, s.rstd2, g.dh2, g.dx2, /*residual=*/dout);
  // Attention branch: dx2 -> datt -> dqkv -> dh1; the residual passes dx2 straight to dx, likewise.
  backward_input(space, b.proj, g.dx2, w.datt);
  attention_backward_input(space, b.shape, s.attn, w.attn, w.datt, g.dqkv);
  backward_input(space, b.qkv, g.dqkv, g.dh1);
  backward_input(space, b.ln1, x, s.mean1, s.rstd1, g.dh1, dx, /*residual=*/g.dx2);
}

template <class T, class A>
void backward_weight(const ExecSpace& space, const Block<T, A>& b, In2<A> x, const BlockStash<T, A>& s,
                     const BlockGrads<T, A>& g, In2<A> dout) {
  backward_weight(space, b.fc_proj, s.g, dout);
  backward_weight(space, b.fc, s.h2, g.df);
  backward_weight(space, b.ln2, s.x2, s.mean2, s.rstd2, g.dh2);
  backward_weight(space, b.proj, s.att, g.dx2);
  backward_weight(space, b.qkv, s.h1, g.dqkv);
  backward_weight(space, b.ln1, x, s.mean1, s.rstd1, g.dh1);
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template ProductsSize block_products_size<T, A>(const AttentionShape&, int);                                        \
  template BlockStash<T, A> allocate_stash(const Block<T, A>&, unsigned);                                             \
  template BlockStash<T, A> overlay(const BlockStash<T, A>&, const BlockStash<T, A>&);                                \
  template void recompute(const ExecSpace&, const Block<T, A>&, Recompute, In2<A>, const BlockStash<T, A>&,           \
                          const BlockWork<T, A>&);                                                                    \
  template BlockGrads<T, A> allocate_grads(const Block<T, A>&);                                                       \
  template BlockWork<T, A> allocate_work(const Block<T, A>&);                                                         \
  template void forward(const ExecSpace&, const Block<T, A>&, In2<A>, const BlockStash<T, A>&,                        \
                        const BlockWork<T, A>&);                                                                      \
  template void backward_input(const ExecSpace&, const Block<T, A>&, In2<A>, const BlockStash<T, A>&,                 \
                               const BlockGrads<T, A>&, const BlockWork<T, A>&, In2<A>, const View2<A>&);             \
  template void backward_weight(const ExecSpace&, const Block<T, A>&, In2<A>, const BlockStash<T, A>&,                \
                                const BlockGrads<T, A>&, In2<A>);
// The sizes only the memory plan asks (model::chunk_bytes): at the training precisions.
#define KPIPE_INSTANTIATE_TRAINING(T, A)                                                                              \
  template std::int64_t stash_bytes<T, A>(unsigned, const AttentionShape&, int);                                      \
  template std::int64_t grads_bytes<T, A>(const AttentionShape&, int);                                                \
  template std::int64_t work_bytes<T, A>(const AttentionShape&);
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE_TRAINING)
#undef KPIPE_INSTANTIATE
#undef KPIPE_INSTANTIATE_TRAINING

}  // namespace kpipe::nn
