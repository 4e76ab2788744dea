#pragma once
// A model chunk: the consecutive layers [first, last) of the GPT that one rank runs as one (virtual)
// stage. It owns their parameters (one ParameterStore) and the stashes of the micro-batches in flight,
// and runs them layer by layer: forward, backward_input, backward_weight. The whole model on one rank
// is the chunk [0, n_layers + 2).
//
// A micro-batch's memory has two lifetimes, each with its pool:
//  - its activation slot, from its forward until its backward is done: the chunk's input, what each layer
//    keeps for backward (under activation recomputation only each block's output), the message buffers;
//  - its backward buffers, from backward_input until backward_weight: the layers' inner gradients and,
//    under recomputation, the recomputed activations that backward_weight reads.
// With plain backwards (each backward_input followed by its backward_weight) one set of backward buffers
// serves every micro-batch; split backwards (zero-bubble schedules) hold one per micro-batch between its I
// and its W. What recomputation drops and only backward_input reads lives in one scratch per chunk.
//
// Precision: T is the accumulation and master type, A the storage of the activations, the slots, the
// backward buffers and the messages (T, or bf16 with T = float). The parameters keep their values,
// gradients and moments in T and, when A is not T, a compute copy of the products' matrices in A
// (ParameterStore); the logits and the loss stay in T. chunk_bytes below is what a chunk allocates.
#include <array>
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

template <class T, class A = T> class Chunk {
 public:
  // Layers [first, last) of desc for micro-batches of `sequences` sequences; desc must outlive the chunk.
  // recompute: which block activations are dropped after the forward and computed again at the start of
  // backward_input (nn/block.hpp); the results are the same bits either way. math: how float products run
  // (blas::Math::tf32 on CUDA builds only).
  Chunk(const ModelDesc& desc, int first, int last, int sequences, nn::Recompute recompute = nn::Recompute::none,
        blas::Math math = blas::Math::exact);
  ~Chunk();

  ParameterStore<T, A>& params() { return params_; }
  const ParameterStore<T, A>& params() const { return params_; }
  // The layers read `values` from now on (buffers of the store's layout: a weight version's), not a copy.
  void use_parameters(const ParameterValues<T, A>& values);
  bool first() const { return embedding_.has_value(); }  // takes tokens
  bool last() const { return head_.has_value(); }        // computes the loss
  std::int64_t rows() const { return rows_; }             // tokens per micro-batch
  int channels() const { return desc_->config.d_model; }

  // Slots hold the micro-batches in flight. A slot is taken for a forward and given back after its
  // backward (after W when I and W are apart); buffers are allocated on first use and then reused.
  int acquire();             // the lowest free slot
  void acquire(int slot);    // that one (a buffer plan's, schedule/buffers.hpp): std::logic_error when in use
  void release(int slot);
  // Slot k becomes slot to[k] (a permutation of the pool): its buffers move with it, nothing is copied.
  void renumber_slots(const std::vector<int>& to);
  int allocated_slots() const { return int(slots_.size()); }  // the pool's size: what this chunk's activations hold
  // Backward buffers are taken by backward_input and given back by backward_weight of the same slot.
  int allocated_backward_sets() const { return int(backward_sets_.size()); }
  nn::Recompute recompute() const { return recompute_; }

  // Where a slot's inputs go and outputs come from.
  const View1<Token>& tokens(int slot) const;    // first chunk: [N] input tokens
  const View1<Token>& targets(int slot) const;   // last chunk: [N] next tokens
  const View2<A>& input(int slot) const;         // not first: [N, C] activation from the previous stage
  const View2<A>& output(int slot) const;        // not last: [N, C] activation for the next stage
  const View2<A>& output_grad(int slot) const;   // not last: [N, C] gradient from the next stage
  const View2<A>& input_grad(int slot) const;    // not first: [N, C] gradient for the previous stage
  // Exchange the buffer behind input(slot), output_grad(slot), output(slot) or input_grad(slot) with
  // `spare` ([N, C]): a send still reading the old buffer keeps it while the slot goes back to the pool with
  // the spare in its place, and a receive posted ahead lands in a spare that moves in when it is used.
  void swap_input(int slot, View2<A>& spare);
  void swap_output_grad(int slot, View2<A>& spare);
  void swap_output(int slot, View2<A>& spare);
  void swap_input_grad(int slot, View2<A>& spare);

  void forward(const ExecSpace& space, int slot);
  // loss_scale = dL/d(per-token loss), e.g. 1 / tokens per mini-batch; used by the last chunk only.
  // Recomputes what the forward dropped, block by block just before each block's backward. Takes the lowest
  // free set of backward buffers, or set `set` (a buffer plan's: std::logic_error when held).
  void backward_input(const ExecSpace& space, int slot, T loss_scale);
  void backward_input(const ExecSpace& space, int slot, T loss_scale, int set);
  // After the slot's backward_input (std::logic_error otherwise); gives its backward buffers back.
  void backward_weight(const ExecSpace& space, int slot);
  // Last chunk: the sum of the slot's per-token losses (after forward).
  double loss_sum(const ExecSpace& space, int slot) const;
  // The same, left in `into` (device memory) without waiting for it.
  void loss_sum(const ExecSpace& space, int slot, const Kokkos::View<double, MemSpace>& into) const;

  // Profiling (kpipe-train --output.profile): while set, every layer's forward, backward_input, backward_weight
  // and recomputation runs fenced and timed, its seconds and calls added to (*times)[layer - first].
  struct LayerTimes {
    std::array<double, 4> seconds{};  // forward, backward_input (without recomputation), backward_weight, recompute
    std::array<long, 4> calls{};
  };
  void set_layer_times(std::vector<LayerTimes>* times) { layer_times_ = times; }

  // For observers (activation traces), global layer index `layer` of this chunk: its output [N, C] (the
  // head's: the logits [N, V], valid after forward until backward_input), and the gradient w.r.t. that
  // output (valid after backward_input until another slot's backward_input takes the buffers; for the head,
  // dL/dlogits: in the logits' buffer when A is T, in a buffer of its own otherwise). When A is not T the
  // head's logits are in T, not A: layer_output refuses the head (std::logic_error), logits gives them.
  View2<const A> layer_output(int slot, int layer) const;
  View2<const A> layer_output_grad(int slot, int layer) const;
  View2<const T> logits(int slot) const;  // last chunk: [N, V] (until backward_input when A is T)
  bool has_layer(int layer) const { return layer >= first_ && layer < last_; }

 private:
  struct Slot;
  struct Backward;
  int layers() const { return last_ - first_; }
  void connect_layers();  // the layers' views onto the store's buffers as they are now
  View2<A> act_in(const Slot& s, int i) const;
  View2<A>& output_of(Slot& s) const;
  // s: the micro-batch's slot; g: its backward buffers
  View2<A> grad_out(const Slot& s, const Backward& g, int i) const;
  View2<A> grad_in(const Slot& s, const Backward& g, int i) const;
  // Block b's stash as forward, backward_input and backward_weight see it: the slot's kept fields, then the
  // backward buffers' recomputed ones (when g is given), then the scratch.
  nn::BlockStash<T, A> stash_of(const Slot& s, const Backward* g, int b) const;
  std::unique_ptr<Slot> make_slot() const;
  std::unique_ptr<Backward> make_backward() const;
  const Backward& backward_of(int slot, const char* what) const;

  const ModelDesc* desc_;
  int first_, last_;
  int sequences_;
  std::int64_t rows_;
  ParameterStore<T, A> params_;
  std::optional<nn::Embedding<T, A>> embedding_;
  std::vector<nn::Block<T, A>> blocks_;
  std::optional<nn::Head<T, A>> head_;
  nn::Recompute recompute_;
  nn::Products<T> products_;  // the layers' product scratch (mixed precision), shared by all of them
  std::optional<nn::BlockWork<T, A>> work_;
  nn::EmbeddingScratch<T> embedding_scratch_;  // the embedding's backward_weight scratch: first chunk only
  nn::BlockStash<T, A> scratch_;  // one block's dropped fields: forward writes them here, recompute too
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<bool> busy_;
  std::vector<std::unique_ptr<Backward>> backward_sets_;
  std::vector<int> backward_holder_;  // per set: the slot whose backward_input took it, -1 when free
  std::vector<int> backward_of_slot_; // per slot: its set since its backward_input (kept after release for observers)
  std::vector<LayerTimes>* layer_times_ = nullptr;
  template <class F> void timed(const ExecSpace& space, int chunk_layer, int kind, const F& f) const;
};

// What a Chunk<T, A> of layers [first, last) for micro-batches of `sequences` sequences allocates, in bytes,
// by the memory categories of core/memory_category.hpp: its parameter store's values and compute copy
// (parameters; gradients and optimizer moments are a T element per parameter each, plus the decay mask's
// byte), one activation slot, one set of backward buffers, and its scratch (workspaces). message: one
// [N, C] buffer in A, the size of everything a stage sends or receives.
struct ChunkBytes {
  std::int64_t parameters = 0;    // the values, in T
  std::int64_t compute_copy = 0;  // the products' matrices in A (0 when A is T); a parameters allocation
  std::int64_t slot = 0;
  std::int64_t backward_set = 0;
  std::int64_t workspace = 0;
  std::int64_t message = 0;
};
template <class T, class A>
ChunkBytes chunk_bytes(const ModelDesc& desc, int first, int last, int sequences,
                       nn::Recompute recompute = nn::Recompute::none);

}  // namespace kpipe::model
