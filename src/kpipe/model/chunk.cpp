#include "kpipe/model/chunk.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace kpipe::model {

template <class T> struct Chunk<T>::Slot {
  View1<Token> tokens, targets;
  View2<T> input, input_grad, embed_out, output_grad;
  std::vector<nn::BlockStash<T>> block_stash;
  std::vector<nn::BlockGrads<T>> block_grads;
  std::optional<nn::HeadStash<T>> head_stash;
  std::optional<nn::HeadGrads<T>> head_grads;
  std::vector<View2<T>> dact;  // dact[i]: gradient w.r.t. the output of chunk layer i (i < layers - 1)
};

template <class T>
Chunk<T>::Chunk(const ModelDesc& desc, int first, int last, int sequences, bool gradients_per_slot)
    : desc_(&desc), first_(first), last_(last), rows_(std::int64_t(sequences) * desc.config.seq_len),
      params_(desc, first, last), gradients_per_slot_(gradients_per_slot) {
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
  if (!blocks_.empty()) work_ = nn::allocate_work(blocks_.front());
  if (!gradients_per_slot_) {
    shared_grads_ = std::make_unique<Slot>();
    allocate_grads(*shared_grads_);
  }
}

template <class T> Chunk<T>::~Chunk() = default;

template <class T> std::unique_ptr<typename Chunk<T>::Slot> Chunk<T>::make_slot() const {
  auto s = std::make_unique<Slot>();
  const int c = channels();
  if (first())
    s->tokens = View1<Token>(uninitialized("kpipe::model::Chunk::tokens"), rows_);
  else {
    s->input = View2<T>(uninitialized("kpipe::model::Chunk::input"), rows_, c);
    s->input_grad = View2<T>(uninitialized("kpipe::model::Chunk::input_grad"), rows_, c);
  }
  if (first()) s->embed_out = View2<T>(uninitialized("kpipe::model::Chunk::embed_out"), rows_, c);
  for (const auto& b : blocks_) s->block_stash.push_back(nn::allocate_stash(b));
  if (last()) {
    s->targets = View1<Token>(uninitialized("kpipe::model::Chunk::targets"), rows_);
    s->head_stash = nn::allocate_stash(*head_, rows_);
  } else {
    s->output_grad = View2<T>(uninitialized("kpipe::model::Chunk::output_grad"), rows_, c);
  }
  if (gradients_per_slot_) allocate_grads(*s);
  return s;
}

// The buffers backward_input fills and backward_weight reads: each block's, the head's, and the
// gradients between the chunk's layers.
template <class T> void Chunk<T>::allocate_grads(Slot& s) const {
  for (const auto& b : blocks_) s.block_grads.push_back(nn::allocate_grads(b));
  if (last()) s.head_grads = nn::allocate_grads(*head_, rows_);
  for (int i = 0; i + 1 < layers(); ++i)
    s.dact.push_back(View2<T>(uninitialized("kpipe::model::Chunk::dact"), rows_, channels()));
}

template <class T> int Chunk<T>::acquire() {
  int slot = 0;
  while (slot < int(busy_.size()) && busy_[slot]) ++slot;
  if (slot == int(busy_.size())) {
    slots_.push_back(make_slot());
    busy_.push_back(false);
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
template <class T> View2<T> Chunk<T>::grad_out(const Slot& s, const Slot& g, int i) const {
  return i + 1 < layers() ? g.dact[i] : s.output_grad;
}

// Gradient w.r.t. chunk layer i's input.
template <class T> View2<T> Chunk<T>::grad_in(const Slot& s, const Slot& g, int i) const {
  return i == 0 ? s.input_grad : g.dact[i - 1];
}

template <class T> void Chunk<T>::forward(const ExecSpace& space, int slot) {
  Kokkos::Profiling::pushRegion("kpipe::model::Chunk::forward");
  const Slot& s = *slots_.at(slot);
  const int offset = first() ? 1 : 0;
  if (first()) nn::forward(space, *embedding_, s.tokens, desc_->config.seq_len, s.embed_out);
  for (std::size_t b = 0; b < blocks_.size(); ++b)
    nn::forward(space, blocks_[b], act_in(s, int(b) + offset), s.block_stash[b], *work_);
  if (last()) nn::forward(space, *head_, act_in(s, layers() - 1), s.targets, *s.head_stash);
  Kokkos::Profiling::popRegion();
}

template <class T> void Chunk<T>::backward_input(const ExecSpace& space, int slot, T loss_scale) {
  Kokkos::Profiling::pushRegion("kpipe::model::Chunk::backward_input");
  const Slot& s = *slots_.at(slot);
  if (!gradients_per_slot_) {
    // One shared set of gradient buffers: another micro-batch's I in between would overwrite what W reads.
    if (awaiting_weights_ >= 0)
      throw std::logic_error(fmt::format("Chunk::backward_input of slot {} before backward_weight of slot {}: "
                                         "split backwards need gradients_per_slot",
                                         slot, awaiting_weights_));
    awaiting_weights_ = slot;
  }
  const Slot& g = grads_of(s);
  const int offset = first() ? 1 : 0;
  if (last()) {
    const int i = layers() - 1;
    nn::backward_input(space, *head_, act_in(s, i), s.targets, loss_scale, *s.head_stash, *g.head_grads,
                       grad_in(s, g, i));
  }
  for (int b = int(blocks_.size()) - 1; b >= 0; --b) {
    const int i = b + offset;
    nn::backward_input(space, blocks_[b], act_in(s, i), s.block_stash[b], g.block_grads[b], *work_,
                       grad_out(s, g, i), grad_in(s, g, i));
  }
  Kokkos::Profiling::popRegion();
}

template <class T> void Chunk<T>::backward_weight(const ExecSpace& space, int slot) {
  Kokkos::Profiling::pushRegion("kpipe::model::Chunk::backward_weight");
  const Slot& s = *slots_.at(slot);
  if (!gradients_per_slot_) {
    if (awaiting_weights_ != slot)
      throw std::logic_error(fmt::format("Chunk::backward_weight of slot {}: the shared gradients hold slot {}'s",
                                         slot, awaiting_weights_));
    awaiting_weights_ = -1;
  }
  const Slot& g = grads_of(s);
  const int offset = first() ? 1 : 0;
  if (last()) nn::backward_weight(space, *head_, act_in(s, layers() - 1), *s.head_stash, *g.head_grads);
  for (int b = int(blocks_.size()) - 1; b >= 0; --b) {
    const int i = b + offset;
    nn::backward_weight(space, blocks_[b], act_in(s, i), s.block_stash[b], g.block_grads[b], grad_out(s, g, i));
  }
  if (first()) nn::backward_weight(space, *embedding_, s.tokens, desc_->config.seq_len, grad_out(s, g, 0));
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
  return grad_out(s, grads_of(s), i);
}

template class Chunk<float>;
template class Chunk<double>;

}  // namespace kpipe::model
