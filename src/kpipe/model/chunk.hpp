#pragma once
// A model chunk: the consecutive layers [first, last) of the GPT that one rank runs as one (virtual)
// stage. It owns their parameters (one ParameterStore) and the stashes of the micro-batches in flight,
// and runs them layer by layer: forward, backward_input, backward_weight. The whole model on one rank
// is the chunk [0, n_layers + 2).
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "kpipe/model/desc.hpp"
#include "kpipe/model/parameters.hpp"
#include "kpipe/nn/block.hpp"
#include "kpipe/nn/embedding.hpp"
#include "kpipe/nn/head.hpp"

namespace kpipe::model {

template <class T> class Chunk {
 public:
  // Layers [first, last) of desc for micro-batches of `sequences` sequences; desc must outlive the chunk.
  // gradients_per_slot: every slot keeps its layers' gradient buffers from backward_input to
  // backward_weight, which split backwards (I now, W later) need. Without it one set serves all slots,
  // enough when each backward_input is followed by its backward_weight before the next (plain B), and a
  // slot holds only what backward reads: about a third less memory per micro-batch in flight.
  Chunk(const ModelDesc& desc, int first, int last, int sequences, bool gradients_per_slot = true);
  ~Chunk();

  ParameterStore<T>& params() { return params_; }
  const ParameterStore<T>& params() const { return params_; }
  bool first() const { return embedding_.has_value(); }  // takes tokens
  bool last() const { return head_.has_value(); }        // computes the loss
  std::int64_t rows() const { return rows_; }             // tokens per micro-batch
  int channels() const { return desc_->config.d_model; }

  // Slots hold the micro-batches in flight. A slot is taken for a forward and given back after its
  // backward (after W when I and W are apart); buffers are allocated on first use and then reused.
  int acquire();
  void release(int slot);
  int allocated_slots() const { return int(slots_.size()); }  // the pool's size: what this chunk's activations hold

  // Where a slot's inputs go and outputs come from.
  const View1<Token>& tokens(int slot) const;    // first chunk: [N] input tokens
  const View1<Token>& targets(int slot) const;   // last chunk: [N] next tokens
  const View2<T>& input(int slot) const;         // not first: [N, C] activation from the previous stage
  const View2<T>& output(int slot) const;        // not last: [N, C] activation for the next stage
  const View2<T>& output_grad(int slot) const;   // not last: [N, C] gradient from the next stage
  const View2<T>& input_grad(int slot) const;    // not first: [N, C] gradient for the previous stage
  // Exchange the buffer behind input(slot), output_grad(slot), output(slot) or input_grad(slot) with
  // `spare` ([N, C]): a send still reading the old buffer keeps it while the slot goes back to the pool with
  // the spare in its place, and a receive posted ahead lands in a spare that moves in when it is used.
  void swap_input(int slot, View2<T>& spare);
  void swap_output_grad(int slot, View2<T>& spare);
  void swap_output(int slot, View2<T>& spare);
  void swap_input_grad(int slot, View2<T>& spare);

  void forward(const ExecSpace& space, int slot);
  // loss_scale = dL/d(per-token loss), e.g. 1 / tokens per mini-batch; used by the last chunk only.
  void backward_input(const ExecSpace& space, int slot, T loss_scale);
  void backward_weight(const ExecSpace& space, int slot);
  // Last chunk: the sum of the slot's per-token losses (after forward).
  double loss_sum(const ExecSpace& space, int slot) const;
  // The same, left in `into` (device memory) without waiting for it.
  void loss_sum(const ExecSpace& space, int slot, const Kokkos::View<double, MemSpace>& into) const;

  // For observers (activation traces), global layer index `layer` of this chunk: its output [N, C] (the
  // head's: the logits [N, V], valid after forward until backward_input), and the gradient w.r.t. that
  // output (valid after backward_input; for the head, dL/dlogits in the same buffer).
  View2<const T> layer_output(int slot, int layer) const;
  View2<const T> layer_output_grad(int slot, int layer) const;
  bool has_layer(int layer) const { return layer >= first_ && layer < last_; }

 private:
  struct Slot;
  int layers() const { return last_ - first_; }
  View2<T> act_in(const Slot& s, int i) const;
  View2<T>& output_of(Slot& s) const;
  // s: the micro-batch's slot; g: where its gradient buffers are (s itself, or the shared set)
  View2<T> grad_out(const Slot& s, const Slot& g, int i) const;
  View2<T> grad_in(const Slot& s, const Slot& g, int i) const;
  void allocate_grads(Slot& s) const;
  const Slot& grads_of(const Slot& s) const { return gradients_per_slot_ ? s : *shared_grads_; }
  std::unique_ptr<Slot> make_slot() const;

  const ModelDesc* desc_;
  int first_, last_;
  std::int64_t rows_;
  ParameterStore<T> params_;
  std::optional<nn::Embedding<T>> embedding_;
  std::vector<nn::Block<T>> blocks_;
  std::optional<nn::Head<T>> head_;
  std::optional<nn::BlockWork<T>> work_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<bool> busy_;
  bool gradients_per_slot_;
  std::unique_ptr<Slot> shared_grads_;  // without gradients_per_slot: the one set of gradient buffers
  int awaiting_weights_ = -1;           // with the shared set: the slot whose backward_weight comes next
};

}  // namespace kpipe::model
