#include "kpipe/model/chunk.hpp"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

#include "kpipe/core/fence.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::model {

namespace {

// The largest scratch the chunk's products need: every block's four Linear layers and the head's.
template <class T, class A>
nn::ProductsSize chunk_products_size(const ModelDesc& desc, int first, int last, int sequences) {
  const auto& c = desc.config;
  const std::int64_t rows = std::int64_t(sequences) * c.seq_len;
  const nn::AttentionShape shape{sequences, c.seq_len, c.n_heads, c.d_model / c.n_heads};
  nn::ProductsSize size;
  for (int l = first; l < last; ++l) {
    if (desc.layers[l].kind == LayerKind::block)
      size.cover(nn::block_products_size<T, A>(shape, c.mlp_ratio * c.d_model));
    if (desc.layers[l].kind == LayerKind::head) size.cover(nn::head_products_size<T, A>(rows, c.d_model, c.vocab));
  }
  return size;
}

}  // namespace

// From the forward until the micro-batch is done here.
template <class T, class A> struct Chunk<T, A>::Slot {
  View1<Token> tokens, targets;
  View2<A> input, input_grad, embed_out, output_grad;
  std::vector<nn::BlockStash<T, A>> block_stash;  // the kept fields only
  std::optional<nn::HeadStash<T, A>> head_stash;
};

// From backward_input until backward_weight.
template <class T, class A> struct Chunk<T, A>::Backward {
  std::vector<nn::BlockGrads<T, A>> block_grads;
  std::vector<nn::BlockStash<T, A>> block_recomputed;  // the dropped fields backward_weight reads
  std::optional<nn::HeadGrads<T, A>> head_grads;
  std::vector<View2<A>> dact;  // dact[i]: gradient w.r.t. the output of chunk layer i (i < layers - 1)
};

template <class T, class A>
Chunk<T, A>::Chunk(const ModelDesc& desc, int first, int last, int sequences, nn::Recompute recompute, blas::Math math)
    : desc_(&desc), first_(first), last_(last), sequences_(sequences),
      rows_(std::int64_t(sequences) * desc.config.seq_len), params_(desc, first, last), recompute_(recompute) {
  if (first < 0 || last > int(desc.layers.size()) || first >= last)
    throw std::invalid_argument(fmt::format("chunk [{}, {}) outside the model's {} layers", first, last,
                                            desc.layers.size()));
  // One product scratch for every layer of the chunk, sized by the largest product it serves (none when A
  // is T: then only the math mode is used).
  const nn::ProductsSize products = chunk_products_size<T, A>(desc, first, last, sequences);
  {
    memory::Scope scope(memory::Category::workspaces);
    products_ = nn::allocate_products<T>(products, math);
  }
  connect_layers();
  if (embedding_) {
    memory::Scope scope(memory::Category::workspaces);
    embedding_scratch_ = nn::allocate_scratch<T>(rows_, desc.config.d_model);
  }
  if (!blocks_.empty()) {
    memory::Scope scope(memory::Category::workspaces);
    work_ = nn::allocate_work(blocks_.front());
    const unsigned dropped = nn::stash_field::all & ~nn::kept_fields(recompute_);
    if (dropped != 0) scratch_ = nn::allocate_stash(blocks_.front(), dropped);
  }
}

template <class T, class A> Chunk<T, A>::~Chunk() = default;

template <class T, class A> void Chunk<T, A>::connect_layers() {
  const auto& c = desc_->config;
  const T eps = T(c.ln_eps);
  auto ln = [&](int l, const std::string& name) {
    return nn::LayerNorm<T, A>{params_.vector(l, name + "/gamma"), params_.vector(l, name + "/beta"),
                               params_.grad_vector(l, name + "/gamma"), params_.grad_vector(l, name + "/beta"), eps};
  };
  auto linear = [&](int l, const std::string& name, bool bias) {
    return nn::Linear<T, A>{params_.compute_matrix(l, name + "/weight"),
                            bias ? params_.vector(l, name + "/bias") : View1<T>(),
                            params_.grad_matrix(l, name + "/weight"),
                            bias ? params_.grad_vector(l, name + "/bias") : View1<T>(), products_};
  };
  blocks_.clear();  // keeps its capacity: taking the views again allocates nothing
  for (int l = first_; l < last_; ++l) {
    switch (desc_->layers[l].kind) {
      case LayerKind::embedding:
        embedding_ = nn::Embedding<T, A>{params_.matrix(l, "wte"), params_.matrix(l, "wpe"),
                                         params_.grad_matrix(l, "wte"), params_.grad_matrix(l, "wpe")};
        break;
      case LayerKind::block:
        blocks_.push_back(nn::Block<T, A>{ln(l, "ln1"), ln(l, "ln2"), linear(l, "attn/qkv", true),
                                          linear(l, "attn/proj", true), linear(l, "mlp/fc", true),
                                          linear(l, "mlp/proj", true),
                                          nn::AttentionShape{sequences_, c.seq_len, c.n_heads, c.d_model / c.n_heads},
                                          c.mlp_ratio * c.d_model});
        break;
      case LayerKind::head:
        head_ = nn::Head<T, A>{ln(l, "ln_f"), linear(l, "lm_head", false)};
        break;
    }
  }
}

template <class T, class A> void Chunk<T, A>::use_parameters(const ParameterValues<T, A>& values) {
  params_.use(values);
  connect_layers();
}

template <class T, class A> std::unique_ptr<typename Chunk<T, A>::Slot> Chunk<T, A>::make_slot() const {
  memory::Scope scope(memory::Category::activations);
  auto s = std::make_unique<Slot>();
  const int c = channels();
  if (first())
    s->tokens = View1<Token>(uninitialized("kpipe::model::Chunk::tokens"), rows_);
  else {
    s->input = View2<A>(uninitialized("kpipe::model::Chunk::input"), rows_, c);
    s->input_grad = View2<A>(uninitialized("kpipe::model::Chunk::input_grad"), rows_, c);
  }
  if (first()) s->embed_out = View2<A>(uninitialized("kpipe::model::Chunk::embed_out"), rows_, c);
  const unsigned kept = nn::kept_fields(recompute_);
  for (const auto& b : blocks_) s->block_stash.push_back(nn::allocate_stash(b, kept));
  if (last()) {
    s->targets = View1<Token>(uninitialized("kpipe::model::Chunk::targets"), rows_);
    s->head_stash = nn::allocate_stash(*head_, rows_);
  } else {
    s->output_grad = View2<A>(uninitialized("kpipe::model::Chunk::output_grad"), rows_, c);
  }
  return s;
}

// The buffers backward_input fills and backward_weight reads: each block's inner gradients and recomputed
// activations, the head's, and the gradients between the chunk's layers.
template <class T, class A> std::unique_ptr<typename Chunk<T, A>::Backward> Chunk<T, A>::make_backward() const {
  memory::Scope scope(memory::Category::backward);
  auto g = std::make_unique<Backward>();
  const unsigned recomputed = nn::weight_fields(recompute_);
  for (const auto& b : blocks_) {
    g->block_grads.push_back(nn::allocate_grads(b));
    g->block_recomputed.push_back(recomputed != 0 ? nn::allocate_stash(b, recomputed) : nn::BlockStash<T, A>{});
  }
  if (last()) g->head_grads = nn::allocate_grads(*head_, rows_);
  for (int i = 0; i + 1 < layers(); ++i)
    g->dact.push_back(View2<A>(uninitialized("kpipe::model::Chunk::dact"), rows_, channels()));
  return g;
}

template <class T, class A> int Chunk<T, A>::acquire() {
  int slot = 0;
  while (slot < int(busy_.size()) && busy_[slot]) ++slot;
  acquire(slot);
  return slot;
}

template <class T, class A> void Chunk<T, A>::acquire(int slot) {
  if (slot < 0) throw std::logic_error(fmt::format("Chunk::acquire: slot {}", slot));
  while (int(slots_.size()) <= slot) {
    slots_.push_back(make_slot());
    busy_.push_back(false);
    backward_of_slot_.push_back(-1);
  }
  if (busy_[slot]) throw std::logic_error(fmt::format("Chunk::acquire: slot {} is in use", slot));
  busy_[slot] = true;
}

template <class T, class A> void Chunk<T, A>::renumber_slots(const std::vector<int>& to) {
  if (to.size() != slots_.size())
    throw std::logic_error(fmt::format("Chunk::renumber_slots: {} numbers for {} slots", to.size(), slots_.size()));
  std::vector<std::unique_ptr<Slot>> slots(slots_.size());
  std::vector<bool> busy(busy_.size());
  std::vector<int> backward_of(backward_of_slot_.size());
  for (std::size_t k = 0; k < to.size(); ++k) {
    const auto target = std::size_t(to[k]);
    if (slots.at(target)) throw std::logic_error("Chunk::renumber_slots: not a permutation");
    slots[target] = std::move(slots_[k]);
    busy[target] = busy_[k];
    backward_of[target] = backward_of_slot_[k];
  }
  for (int& holder : backward_holder_)
    if (holder >= 0) holder = to.at(std::size_t(holder));
  slots_ = std::move(slots);
  busy_ = std::move(busy);
  backward_of_slot_ = std::move(backward_of);
}

template <class T, class A> void Chunk<T, A>::release(int slot) {
  if (!busy_.at(slot)) throw std::logic_error(fmt::format("slot {} released twice", slot));
  busy_[slot] = false;
}

template <class T, class A> const View1<Token>& Chunk<T, A>::tokens(int slot) const { return slots_.at(slot)->tokens; }
template <class T, class A> const View1<Token>& Chunk<T, A>::targets(int slot) const {
  return slots_.at(slot)->targets;
}
template <class T, class A> const View2<A>& Chunk<T, A>::input(int slot) const { return slots_.at(slot)->input; }
template <class T, class A> const View2<A>& Chunk<T, A>::input_grad(int slot) const {
  return slots_.at(slot)->input_grad;
}
template <class T, class A> const View2<A>& Chunk<T, A>::output_grad(int slot) const {
  return slots_.at(slot)->output_grad;
}
template <class T, class A> const View2<A>& Chunk<T, A>::output(int slot) const { return output_of(*slots_.at(slot)); }

// The chunk's last activation: the last block's output, or the embedding's in a chunk of the embedding alone.
template <class T, class A> View2<A>& Chunk<T, A>::output_of(Slot& s) const {
  return blocks_.empty() ? s.embed_out : s.block_stash.back().out;
}

namespace {
// Exchanges a slot's message buffer with a spare of the same extents.
template <class V> void swap_buffer(const char* which, V& held, V& spare) {
  if (spare.extent(0) != held.extent(0) || spare.extent(1) != held.extent(1))
    throw std::logic_error(fmt::format("Chunk::swap_{}: the spare is [{}, {}], the slot's buffer [{}, {}]", which,
                                       spare.extent(0), spare.extent(1), held.extent(0), held.extent(1)));
  std::swap(held, spare);
}
}  // namespace

template <class T, class A> void Chunk<T, A>::swap_input(int slot, View2<A>& spare) {
  swap_buffer("input", slots_.at(slot)->input, spare);
}
template <class T, class A> void Chunk<T, A>::swap_output_grad(int slot, View2<A>& spare) {
  swap_buffer("output_grad", slots_.at(slot)->output_grad, spare);
}
template <class T, class A> void Chunk<T, A>::swap_output(int slot, View2<A>& spare) {
  swap_buffer("output", output_of(*slots_.at(slot)), spare);
}
template <class T, class A> void Chunk<T, A>::swap_input_grad(int slot, View2<A>& spare) {
  swap_buffer("input_grad", slots_.at(slot)->input_grad, spare);
}

// Chunk layer i's input activation: the chunk's input, or the previous layer's output.
template <class T, class A> View2<A> Chunk<T, A>::act_in(const Slot& s, int i) const {
  if (i == 0) return s.input;
  const int prev = i - 1 - (first() ? 1 : 0);  // index of the previous layer among the blocks
  return prev < 0 ? s.embed_out : s.block_stash[prev].out;
}

// Gradient w.r.t. chunk layer i's output.
template <class T, class A> View2<A> Chunk<T, A>::grad_out(const Slot& s, const Backward& g, int i) const {
  return i + 1 < layers() ? g.dact[i] : s.output_grad;
}

// Gradient w.r.t. chunk layer i's input.
template <class T, class A> View2<A> Chunk<T, A>::grad_in(const Slot& s, const Backward& g, int i) const {
  return i == 0 ? s.input_grad : g.dact[i - 1];
}

template <class T, class A>
nn::BlockStash<T, A> Chunk<T, A>::stash_of(const Slot& s, const Backward* g, int b) const {
  if (recompute_ == nn::Recompute::none) return s.block_stash[b];
  const nn::BlockStash<T, A> dropped = g ? nn::overlay(g->block_recomputed[b], scratch_) : scratch_;
  return nn::overlay(s.block_stash[b], dropped);
}

template <class T, class A>
const typename Chunk<T, A>::Backward& Chunk<T, A>::backward_of(int slot, const char* what) const {
  const int set = backward_of_slot_.at(slot);
  if (set < 0 || backward_holder_[set] != slot)
    throw std::logic_error(fmt::format("Chunk::{} of slot {}: no backward_input of that slot holds backward buffers",
                                       what, slot));
  return *backward_sets_[set];
}

template <class T, class A>
template <class F>
void Chunk<T, A>::timed(const ExecSpace& space, int chunk_layer, int kind, const F& f) const {
  if (!layer_times_) return f();
  named_fence(space, "kpipe::model::Chunk::timed: a layer profile's wall clock starts");
  const auto start = std::chrono::steady_clock::now();
  f();
  named_fence(space, "kpipe::model::Chunk::timed: a layer profile's wall clock stops");
  auto& entry = (*layer_times_)[chunk_layer];
  entry.seconds[kind] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++entry.calls[kind];
}

template <class T, class A> void Chunk<T, A>::forward(const ExecSpace& space, int slot) {
  Kokkos::Profiling::pushRegion("kpipe::model::Chunk::forward");
  const Slot& s = *slots_.at(slot);
  const int offset = first() ? 1 : 0;
  if (first()) timed(space, 0, 0, [&] { nn::forward(space, *embedding_, s.tokens, desc_->config.seq_len, s.embed_out); });
  for (std::size_t b = 0; b < blocks_.size(); ++b)
    timed(space, int(b) + offset, 0, [&] {
      nn::forward(space, blocks_[b], act_in(s, int(b) + offset), stash_of(s, nullptr, int(b)), *work_);
    });
  if (last())
    timed(space, layers() - 1, 0, [&] { nn::forward(space, *head_, act_in(s, layers() - 1), s.targets, *s.head_stash); });
  Kokkos::Profiling::popRegion();
}

template <class T, class A> void Chunk<T, A>::backward_input(const ExecSpace& space, int slot, T loss_scale) {
  // The lowest free set of backward buffers, a new one when all are held (split backwards hold several).
  int set = 0;
  while (set < int(backward_sets_.size()) && backward_holder_[set] >= 0) ++set;
  backward_input(space, slot, loss_scale, set);
}

template <class T, class A>
void Chunk<T, A>::backward_input(const ExecSpace& space, int slot, T loss_scale, int set) {
  Kokkos::Profiling::pushRegion("kpipe::model::Chunk::backward_input");
  const Slot& s = *slots_.at(slot);
  if (const int held = backward_of_slot_.at(slot); held >= 0 && backward_holder_[held] == slot)
    throw std::logic_error(fmt::format("Chunk::backward_input of slot {} twice before its backward_weight", slot));
  if (set < 0) throw std::logic_error(fmt::format("Chunk::backward_input of slot {}: backward set {}", slot, set));
  while (int(backward_sets_.size()) <= set) {
    backward_sets_.push_back(make_backward());
    backward_holder_.push_back(-1);
  }
  if (backward_holder_[set] >= 0)
    throw std::logic_error(fmt::format("Chunk::backward_input of slot {}: backward set {} is in use", slot, set));
  backward_holder_[set] = slot;
  backward_of_slot_[slot] = set;
  const Backward& g = *backward_sets_[set];
  const int offset = first() ? 1 : 0;
  if (last()) {
    const int i = layers() - 1;
    timed(space, i, 1, [&] {
      nn::backward_input(space, *head_, act_in(s, i), s.targets, loss_scale, *s.head_stash, *g.head_grads,
                         grad_in(s, g, i));
    });
  }
  for (int b = int(blocks_.size()) - 1; b >= 0; --b) {
    const int i = b + offset;
    const nn::BlockStash<T, A> stash = stash_of(s, &g, b);
    if (recompute_ != nn::Recompute::none)
      timed(space, i, 3, [&] { nn::recompute(space, blocks_[b], recompute_, act_in(s, i), stash, *work_); });
    timed(space, i, 1, [&] {
      nn::backward_input(space, blocks_[b], act_in(s, i), stash, g.block_grads[b], *work_, grad_out(s, g, i),
                         grad_in(s, g, i));
    });
  }
  Kokkos::Profiling::popRegion();
}

template <class T, class A> void Chunk<T, A>::backward_weight(const ExecSpace& space, int slot) {
  Kokkos::Profiling::pushRegion("kpipe::model::Chunk::backward_weight");
  const Slot& s = *slots_.at(slot);
  const Backward& g = backward_of(slot, "backward_weight");
  const int offset = first() ? 1 : 0;
  if (last())
    timed(space, layers() - 1, 2,
          [&] { nn::backward_weight(space, *head_, act_in(s, layers() - 1), *s.head_stash, *g.head_grads); });
  for (int b = int(blocks_.size()) - 1; b >= 0; --b) {
    const int i = b + offset;
    timed(space, i, 2, [&] {
      nn::backward_weight(space, blocks_[b], act_in(s, i), stash_of(s, &g, b), g.block_grads[b], grad_out(s, g, i));
    });
  }
  if (first())
    timed(space, 0, 2, [&] {
      nn::backward_weight(space, *embedding_, s.tokens, desc_->config.seq_len, grad_out(s, g, 0), embedding_scratch_);
    });
  backward_holder_[backward_of_slot_[slot]] = -1;  // free; its contents stay readable until it is taken again
  Kokkos::Profiling::popRegion();
}

template <class T, class A> double Chunk<T, A>::loss_sum(const ExecSpace& space, int slot) const {
  return nn::loss_sum(space, *slots_.at(slot)->head_stash);
}

template <class T, class A>
void Chunk<T, A>::loss_sum(const ExecSpace& space, int slot, const Kokkos::View<double, MemSpace>& into) const {
  nn::loss_sum(space, *slots_.at(slot)->head_stash, into);
}

template <class T, class A> View2<const A> Chunk<T, A>::layer_output(int slot, int layer) const {
  const Slot& s = *slots_.at(slot);
  const int i = layer - first_;
  if (i < 0 || i >= layers()) throw std::out_of_range(fmt::format("layer {} is not in this chunk", layer));
  if (last() && i == layers() - 1) {
    if constexpr (mixed_precision<T, A>)
      throw std::logic_error(fmt::format("Chunk::layer_output: the head's output (layer {}) is its logits, in {}, "
                                         "not {}: Chunk::logits", layer, type_name<T>(), type_name<A>()));
    else
      return s.head_stash->logits;
  }
  return i == 0 && first() ? s.embed_out : s.block_stash[i - (first() ? 1 : 0)].out;
}

template <class T, class A> View2<const A> Chunk<T, A>::layer_output_grad(int slot, int layer) const {
  const Slot& s = *slots_.at(slot);
  const int i = layer - first_;
  if (i < 0 || i >= layers()) throw std::out_of_range(fmt::format("layer {} is not in this chunk", layer));
  if constexpr (!mixed_precision<T, A>)  // dL/dlogits over the logits, which outlive the backward buffers
    if (last() && i == layers() - 1) return s.head_stash->logits;
  const int set = backward_of_slot_.at(slot);
  if (set < 0 || (backward_holder_[set] >= 0 && backward_holder_[set] != slot))
    throw std::logic_error(fmt::format("Chunk::layer_output_grad of slot {}: its backward buffers were taken", slot));
  const Backward& g = *backward_sets_[set];
  if (last() && i == layers() - 1) return nn::dlogits(*s.head_stash, *g.head_grads);
  return grad_out(s, g, i);
}

template <class T, class A> View2<const T> Chunk<T, A>::logits(int slot) const {
  const Slot& s = *slots_.at(slot);
  if (!last()) throw std::logic_error("Chunk::logits: this chunk has no head");
  return s.head_stash->logits;
}


template <class T, class A>
ChunkBytes chunk_bytes(const ModelDesc& desc, int first, int last, int sequences, nn::Recompute recompute) {
  const auto& c = desc.config;
  const std::int64_t n = std::int64_t(sequences) * c.seq_len, width = c.d_model, vocab = c.vocab;
  const nn::AttentionShape shape{sequences, c.seq_len, c.n_heads, c.d_model / c.n_heads};
  const int hidden = c.mlp_ratio * c.d_model;
  const bool has_first = first == 0, has_last = last == int(desc.layers.size());
  const std::int64_t a = sizeof(A), t = sizeof(T), token = sizeof(Token);
  int blocks = 0;
  ChunkBytes m;
  for (int l = first; l < last; ++l) {
    m.parameters += desc.layers[l].num_params() * t;
    if (desc.layers[l].kind == LayerKind::block) ++blocks;
  }
  m.compute_copy = compute_copy_elements<T, A>(desc, first, last) * a;
  m.message = n * width * a;
  // Activation slot (make_slot): the chunk's input and its gradient, or the tokens and the embedding's output;
  // each block's kept stash; the targets and the head's stash, or the output's gradient.
  m.slot = has_first ? n * token + n * width * a : 2 * n * width * a;
  m.slot += blocks * nn::stash_bytes<T, A>(nn::kept_fields(recompute), shape, hidden);
  if (has_last) {
    const nn::HeadElements head = nn::head_stash_elements<T, A>(n, width, vocab);
    m.slot += n * token + head.a * a + head.t * t;
  } else {
    m.slot += n * width * a;
  }
  // Backward buffers (make_backward): inner gradients, recomputed activations backward_weight reads, the head's
  // gradients, the gradients between the chunk's layers.
  m.backward_set = blocks * (nn::grads_bytes<T, A>(shape, hidden) +
                             nn::stash_bytes<T, A>(nn::weight_fields(recompute), shape, hidden));
  if (has_last) m.backward_set += nn::head_grads_elements<T, A>(n, width, vocab) * a;
  m.backward_set += std::int64_t(last - first - 1) * n * width * a;
  // Scratch (the constructor): the blocks' work and recomputation buffers, the products' scratch, the
  // embedding's row order and pieces.
  if (blocks > 0) {
    const unsigned dropped = nn::stash_field::all & ~nn::kept_fields(recompute);
    m.workspace = nn::work_bytes<T, A>(shape) + (dropped ? nn::stash_bytes<T, A>(dropped, shape, hidden) : 0);
  }
  m.workspace += chunk_products_size<T, A>(desc, first, last, sequences).bytes(sizeof(T));
  if (has_first) m.workspace += nn::scratch_bytes<T>(n, width);  // the embedding's row order and pieces
  m.workspace += std::int64_t(last - first) * std::int64_t(sizeof(double));  // the store's per-layer squares
  m.workspace += copy_segments_bytes<T, A>(desc, first, last);  // and its compute copy's segment table
  return m;
}

#define KPIPE_INSTANTIATE(T, A) template class Chunk<T, A>;
// What the memory plan asks, at the precisions a run trains in.
#define KPIPE_INSTANTIATE_TRAINING(T, A)                                                                              \
  template ChunkBytes chunk_bytes<T, A>(const ModelDesc&, int, int, int, nn::Recompute);
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE_TRAINING)
#undef KPIPE_INSTANTIATE
#undef KPIPE_INSTANTIATE_TRAINING

}  // namespace kpipe::model
