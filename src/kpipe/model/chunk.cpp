#include "kpipe/model/chunk.hpp"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

#include "kpipe/core/memory_category.hpp"

namespace kpipe::model {

// From the forward until the micro-batch is done here.
template <class T> struct Chunk<T>::Slot {
  View1<Token> tokens, targets;
  View2<T> input, input_grad, embed_out, output_grad;
  std::vector<nn::BlockStash<T>> block_stash;  // the kept fields only
  std::optional<nn::HeadStash<T>> head_stash;
};

// From backward_input until backward_weight.
template <class T> struct Chunk<T>::Backward {
  std::vector<nn::BlockGrads<T>> block_grads;
  std::vector<nn::BlockStash<T>> block_recomputed;  // the dropped fields backward_weight reads
  std::optional<nn::HeadGrads<T>> head_grads;
  std::vector<View2<T>> dact;  // dact[i]: gradient w.r.t. the output of chunk layer i (i < layers - 1)
};

template <class T>
Chunk<T>::Chunk(const ModelDesc& desc, int first, int last, int sequences, nn::Recompute recompute)
    : desc_(&desc), first_(first), last_(last), rows_(std::int64_t(sequences) * desc.config.seq_len),
      params_(desc, first, last), recompute_(recompute) {
  const auto& c = desc.config;
  if (first < 0 || last > int(desc.layers.size()) || first >= last)
    throw std::invalid_argument(fmt::format("chunk [{}, {}) outside the model's {} layers", first, last,
                                            desc.layers.size()));
  const T eps = T(c.ln_eps);
  auto ln = [&](int l, const std::string& name) {
    return nn::LayerNorm<T>{params_.vector(l, name + "/gamma"), params_.vector(l, name + "/beta"),
                            params_.grad_vector(l, name + "/gamma"), params_.grad_vector(l, name + "/beta"), eps};
  };
  auto linear = [&](int l, const std::string& name, bool bias) {
    return nn::Linear<T>{params_.matrix(l, name + "/weight"), bias ? params_.vector(l, name + "/bias") : View1<T>(),
                         params_.grad_matrix(l, name + "/weight"),
                         bias ? params_.grad_vector(l, name + "/bias") : View1<T>()};
  };
  for (int l = first; l < last; ++l) {
    switch (desc.layers[l].kind) {
      case LayerKind::embedding:
        embedding_ = nn::Embedding<T>{params_.matrix(l, "wte"), params_.matrix(l, "wpe"), params_.grad_matrix(l, "wte"),
                                      params_.grad_matrix(l, "wpe")};
        break;
      case LayerKind::block: {
        nn::Block<T> b{ln(l, "ln1"), ln(l, "ln2"), linear(l, "attn/qkv", true), linear(l, "attn/proj", true),
                       linear(l, "mlp/fc", true), linear(l, "mlp/proj", true),
                       nn::AttentionShape{sequences, c.seq_len, c.n_heads, c.d_model / c.n_heads},
                       c.mlp_ratio * c.d_model};
        blocks_.push_back(b);
        break;
      }
      case LayerKind::head:
        head_ = nn::Head<T>{ln(l, "ln_f"), linear(l, "lm_head", false)};
        break;
    }
  }
  if (!blocks_.empty()) {
    memory::Scope scope(memory::Category::workspaces);
    work_ = nn::allocate_work(blocks_.front());
    const unsigned dropped = nn::stash_field::all & ~nn::kept_fields(recompute_);
    if (dropped != 0) scratch_ = nn::allocate_stash(blocks_.front(), dropped);
  }
}

template <class T> Chunk<T>::~Chunk() = default;

template <class T> std::unique_ptr<typename Chunk<T>::Slot> Chunk<T>::make_slot() const {
  memory::Scope scope(memory::Category::activations);
  auto s = std::make_unique<Slot>();
  const int c = channels();
  if (first())
    s->tokens = View1<Token>(uninitialized("kpipe::model::Chunk::tokens"), rows_);
  else {
    s->input = View2<T>(uninitialized("kpipe::model::Chunk::input"), rows_, c);
    s->input_grad = View2<T>(uninitialized("kpipe::model::Chunk::input_grad"), rows_, c);
  }
  if (first()) s->embed_out = View2<T>(uninitialized("kpipe::model::Chunk::embed_out"), rows_, c);
  const unsigned kept = nn::kept_fields(recompute_);
  for (const auto& b : blocks_) s->block_stash.push_back(nn::allocate_stash(b, kept));
  if (last()) {
    s->targets = View1<Token>(uninitialized("kpipe::model::Chunk::targets"), rows_);
    s->head_stash = nn::allocate_stash(*head_, rows_);
  } else {
    s->output_grad = View2<T>(uninitialized("kpipe::model::Chunk::output_grad"), rows_, c);
  }
  return s;
}

// The buffers backward_input fills and backward_weight reads: each block's inner gradients and recomputed
// activations, the head's, and the gradients between the chunk's layers.
template <class T> std::unique_ptr<typename Chunk<T>::Backward> Chunk<T>::make_backward() const {
  memory::Scope scope(memory::Category::backward);
  auto g = std::make_unique<Backward>();
  const unsigned recomputed = nn::weight_fields(recompute_);
  for (const auto& b : blocks_) {
    g->block_grads.push_back(nn::allocate_grads(b));
    g->block_recomputed.push_back(recomputed != 0 ? nn::allocate_stash(b, recomputed) : nn::BlockStash<T>{});
  }
  if (last()) g->head_grads = nn::allocate_grads(*head_, rows_);
  for (int i = 0; i + 1 < layers(); ++i)
    g->dact.push_back(View2<T>(uninitialized("kpipe::model::Chunk::dact"), rows_, channels()));
  return g;
}

template <class T> int Chunk<T>::acquire() {
  int slot = 0;
  while (slot < int(busy_.size()) && busy_[slot]) ++slot;
  if (slot == int(busy_.size())) {
    slots_.push_back(make_slot());
    busy_.push_back(false);
    backward_of_slot_.push_back(-1);
  }
  busy_[slot] = true;
  return slot;
}

template <class T> void Chunk<T>::release(int slot) {
  if (!busy_.at(slot)) throw std::logic_error(fmt::format("slot {} released twice", slot));
  busy_[slot] = false;
}

template <class T> const View1<Token>& Chunk<T>::tokens(int slot) const { return slots_.at(slot)->tokens; }
template <class T> const View1<Token>& Chunk<T>::targets(int slot) const { return slots_.at(slot)->targets; }
template <class T> const View2<T>& Chunk<T>::input(int slot) const { return slots_.at(slot)->input; }
template <class T> const View2<T>& Chunk<T>::input_grad(int slot) const { return slots_.at(slot)->input_grad; }
template <class T> const View2<T>& Chunk<T>::output_grad(int slot) const { return slots_.at(slot)->output_grad; }
template <class T> const View2<T>& Chunk<T>::output(int slot) const { return output_of(*slots_.at(slot)); }

// The chunk's last activation: the last block's output, or the embedding's in a chunk of the embedding alone.
template <class T> View2<T>& Chunk<T>::output_of(Slot& s) const {
  return blocks_.empty() ? s.embed_out : s.block_stash.back().out;
}

namespace {
// Exchanges a slot's message buffer with a spare of the same extents.
template <class T> void swap_buffer(const char* which, View2<T>& held, View2<T>& spare) {
  if (spare.extent(0) != held.extent(0) || spare.extent(1) != held.extent(1))
    throw std::logic_error(fmt::format("Chunk::swap_{}: the spare is [{}, {}], the slot's buffer [{}, {}]", which,
                                       spare.extent(0), spare.extent(1), held.extent(0), held.extent(1)));
  std::swap(held, spare);
}
}  // namespace

template <class T> void Chunk<T>::swap_input(int slot, View2<T>& spare) {
  swap_buffer("input", slots_.at(slot)->input, spare);
}
template <class T> void Chunk<T>::swap_output_grad(int slot, View2<T>& spare) {
  swap_buffer("output_grad", slots_.at(slot)->output_grad, spare);
}
template <class T> void Chunk<T>::swap_output(int slot, View2<T>& spare) {
  swap_buffer("output", output_of(*slots_.at(slot)), spare);
}
template <class T> void Chunk<T>::swap_input_grad(int slot, View2<T>& spare) {
  swap_buffer("input_grad", slots_.at(slot)->input_grad, spare);
}

// Chunk layer i's input activation: the chunk's input, or the previous layer's output.
template <class T> View2<T> Chunk<T>::act_in(const Slot& s, int i) const {
  if (i == 0) return s.input;
  const int prev = i - 1 - (first() ? 1 : 0);  // index of the previous layer among the blocks
  return prev < 0 ? s.embed_out : s.block_stash[prev].out;
}

// Gradient w.r.t. chunk layer i's output.
template <class T> View2<T> Chunk<T>::grad_out(const Slot& s, const Backward& g, int i) const {
  return i + 1 < layers() ? g.dact[i] : s.output_grad;
}

// Gradient w.r.t. chunk layer i's input.
template <class T> View2<T> Chunk<T>::grad_in(const Slot& s, const Backward& g, int i) const {
  return i == 0 ? s.input_grad : g.dact[i - 1];
}

template <class T> nn::BlockStash<T> Chunk<T>::stash_of(const Slot& s, const Backward* g, int b) const {
  if (recompute_ == nn::Recompute::none) return s.block_stash[b];
  const nn::BlockStash<T> dropped = g ? nn::overlay(g->block_recomputed[b], scratch_) : scratch_;
  return nn::overlay(s.block_stash[b], dropped);
}

template <class T> const typename Chunk<T>::Backward& Chunk<T>::backward_of(int slot, const char* what) const {
  const int set = backward_of_slot_.at(slot);
  if (set < 0 || backward_holder_[set] != slot)
    throw std::logic_error(fmt::format("Chunk::{} of slot {}: no backward_input of that slot holds backward buffers",
                                       what, slot));
  return *backward_sets_[set];
}

template <class T>
template <class F>
void Chunk<T>::timed(const ExecSpace& space, int chunk_layer, int kind, const F& f) const {
  if (!layer_times_) return f();
  space.fence();
  const auto start = std::chrono::steady_clock::now();
  f();
  space.fence();
  auto& entry = (*layer_times_)[chunk_layer];
  entry.seconds[kind] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++entry.calls[kind];
}

template <class T> void Chunk<T>::forward(const ExecSpace& space, int slot) {
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

template <class T> void Chunk<T>::backward_input(const ExecSpace& space, int slot, T loss_scale) {
  Kokkos::Profiling::pushRegion("kpipe::model::Chunk::backward_input");
  const Slot& s = *slots_.at(slot);
  if (const int held = backward_of_slot_.at(slot); held >= 0 && backward_holder_[held] == slot)
    throw std::logic_error(fmt::format("Chunk::backward_input of slot {} twice before its backward_weight", slot));
  // The lowest free set of backward buffers, a new one when all are held (split backwards hold several).
  int set = 0;
  while (set < int(backward_sets_.size()) && backward_holder_[set] >= 0) ++set;
  if (set == int(backward_sets_.size())) {
    backward_sets_.push_back(make_backward());
    backward_holder_.push_back(-1);
  }
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
    const nn::BlockStash<T> stash = stash_of(s, &g, b);
    if (recompute_ != nn::Recompute::none)
      timed(space, i, 3, [&] { nn::recompute(space, blocks_[b], recompute_, act_in(s, i), stash, *work_); });
    timed(space, i, 1, [&] {
      nn::backward_input(space, blocks_[b], act_in(s, i), stash, g.block_grads[b], *work_, grad_out(s, g, i),
                         grad_in(s, g, i));
    });
  }
  Kokkos::Profiling::popRegion();
}

template <class T> void Chunk<T>::backward_weight(const ExecSpace& space, int slot) {
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
    timed(space, 0, 2,
          [&] { nn::backward_weight(space, *embedding_, s.tokens, desc_->config.seq_len, grad_out(s, g, 0)); });
  backward_holder_[backward_of_slot_[slot]] = -1;  // free; its contents stay readable until it is taken again
  Kokkos::Profiling::popRegion();
}

template <class T> double Chunk<T>::loss_sum(const ExecSpace& space, int slot) const {
  return nn::loss_sum(space, *slots_.at(slot)->head_stash);
}

template <class T>
void Chunk<T>::loss_sum(const ExecSpace& space, int slot, const Kokkos::View<double, MemSpace>& into) const {
  nn::loss_sum(space, *slots_.at(slot)->head_stash, into);
}

template <class T> View2<const T> Chunk<T>::layer_output(int slot, int layer) const {
  const Slot& s = *slots_.at(slot);
  const int i = layer - first_;
  if (i < 0 || i >= layers()) throw std::out_of_range(fmt::format("layer {} is not in this chunk", layer));
  if (last() && i == layers() - 1) return s.head_stash->logits;
  return i == 0 && first() ? s.embed_out : s.block_stash[i - (first() ? 1 : 0)].out;
}

template <class T> View2<const T> Chunk<T>::layer_output_grad(int slot, int layer) const {
  const Slot& s = *slots_.at(slot);
  const int i = layer - first_;
  if (i < 0 || i >= layers()) throw std::out_of_range(fmt::format("layer {} is not in this chunk", layer));
  if (last() && i == layers() - 1) return s.head_stash->logits;
  const int set = backward_of_slot_.at(slot);
  if (set < 0 || (backward_holder_[set] >= 0 && backward_holder_[set] != slot))
    throw std::logic_error(fmt::format("Chunk::layer_output_grad of slot {}: its backward buffers were taken", slot));
  return grad_out(s, *backward_sets_[set], i);
}

template class Chunk<float>;
template class Chunk<double>;

}  // namespace kpipe::model
