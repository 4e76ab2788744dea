#pragma once
// The parameters of a run of consecutive layers (a model chunk), their gradients and optimizer moments,
// each carved out of one allocation so that the optimizer is one kernel and a checkpoint one copy.
// Tensors are laid out in global layer order, then in the order of the layer's ParamSpec list.
//
// Mixed precision (A, the storage type, not T): the values stay the master copy in T, and the matrices the
// layers' products read (ParamSpec::product_operand) have a compute copy in A, each rounded once from its
// master value by refresh_compute_copy. The copy is only as fresh as its last refresh: whatever writes the
// values (initialize, which refreshes itself; the optimizer; a checkpoint load) must refresh it before the
// next forward. When A is T there is no copy: the compute views are the values. A weight version keeps its
// copy beside its values (ParameterValues), so reading another version needs no refresh.
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/rounded_copy.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/model/desc.hpp"

namespace kpipe::model {

struct TensorSlot {
  int layer = 0;                     // global layer index
  const ParamSpec* spec = nullptr;   // into the ModelDesc the store was built from
  std::int64_t offset = 0;           // into the flat buffers
  std::int64_t compute_offset = -1;  // into the compute copy (mixed precision), -1 when it has none there
  std::string path() const;          // "layers/03/attn/qkv/weight"
};

// What the layers read of a store: the master values and, under mixed precision, their compute copy (empty
// when A is T). A store's own buffers, or a weight version's of the same layout (runtime/weight_versions.hpp).
template <class T, class A = T> struct ParameterValues {
  View1<T> values;
  View1<A> compute;
};

template <class T, class A = T> class ParameterStore {
 public:
  // Layers [first, last) of desc; desc must outlive the store.
  ParameterStore(const ModelDesc& desc, int first, int last);

  // Fills every parameter from (seed, global layer index, parameter name): the same values on any layout.
  // Refreshes the compute copy.
  void initialize(const ExecSpace& space, std::uint64_t seed);
  // The compute copy := the values, each rounded to A once (nothing to do when A is T): one kernel for the
  // whole store, walking its segment table.
  void refresh_compute_copy(const ExecSpace& space);
  // Where a kernel over the values writes their compute copy too (the optimizer's update): the current
  // buffers' copy and the store's segment table; empty when A is T.
  RoundedCopy rounded_copy() const;
  void zero_grads(const ExecSpace& space);
  // The sum of squares of each layer's gradients, in layer order: one queued reduction per layer into a
  // device buffer and one copy out, so the caller waits for the device once, not once per layer.
  std::vector<double> layer_grad_squares(const ExecSpace& space) const;
  // The same queued into `into` (last - first doubles of host memory) without waiting, for a caller that reads
  // several stores' sums after one fence.
  void queue_layer_grad_squares(const ExecSpace& space, double* into) const;

  const std::vector<TensorSlot>& slots() const { return slots_; }
  int first_layer() const { return first_; }
  int last_layer() const { return last_; }
  std::int64_t size() const { return values_.extent(0); }

  // Views of one tensor (unmanaged views into the flat buffers).
  View1<T> vector(int layer, const std::string& name) const { return view1(values_, find(layer, name)); }
  View2<T> matrix(int layer, const std::string& name) const { return view2(values_, find(layer, name)); }
  View1<T> grad_vector(int layer, const std::string& name) const { return view1(grads_, find(layer, name)); }
  View2<T> grad_matrix(int layer, const std::string& name) const { return view2(grads_, find(layer, name)); }
  // The matrix as the products read it: its compute copy in A (the values themselves when A is T).
  View2<A> compute_matrix(int layer, const std::string& name) const;

  // The buffers the values and compute views point into: the store's own until use() gives it others of the
  // same lengths (a weight version's). Views taken before keep pointing at the old ones (Chunk::use_parameters
  // takes its layers' again).
  ParameterValues<T, A> buffers() const { return {values_, compute_}; }
  void use(const ParameterValues<T, A>& buffers);

  // The flat buffers: values, gradients, optimizer moments, and 1 where weight decay applies.
  const View1<T>& values() const { return values_; }
  const View1<T>& grads() const { return grads_; }
  const View1<T>& moment1() const { return moment1_; }
  const View1<T>& moment2() const { return moment2_; }
  const View1<const std::uint8_t>& decay_mask() const { return decay_mask_; }
  // The compute copy, flat (empty when A is T), and its length.
  const View1<A>& compute_values() const { return compute_; }
  std::int64_t compute_size() const { return compute_.extent(0); }

  // Offset and length of one layer's parameters in the flat buffers (layers are contiguous).
  std::pair<std::int64_t, std::int64_t> layer_range(int layer) const;

 private:
  const TensorSlot& find(int layer, const std::string& name) const;
  static View1<T> view1(const View1<T>& flat, const TensorSlot& s);
  static View2<T> view2(const View1<T>& flat, const TensorSlot& s);

  const ModelDesc* desc_;
  int first_, last_;
  std::vector<TensorSlot> slots_;
  View1<T> values_, grads_, moment1_, moment2_;
  View1<const std::uint8_t> decay_mask_;
  View1<A> compute_;
  View1<double> layer_squares_;  // [last - first]: layer_grad_squares' device results (a workspace)
  View1<const std::int64_t> segment_starts_, segment_offsets_;  // rounded_copy()'s table (mixed precision)
};

// The flat buffer cut into runs that either all have a compute copy, contiguous there, or all have none, in
// buffer order (RoundedCopy's table, core/rounded_copy.hpp). Empty when A is T.
struct CopySegment {
  std::int64_t start = 0, length = 0, compute_offset = -1;
};
template <class T, class A>
std::vector<CopySegment> copy_segments(const ModelDesc& desc, int first, int last) {
  std::vector<CopySegment> segments;
  if constexpr (mixed_precision<T, A>) {
    std::int64_t offset = 0, compute = 0;
    for (int l = first; l < last; ++l)
      for (const auto& spec : desc.layers.at(l).params) {
        const std::int64_t to = spec.product_operand ? compute : -1;
        CopySegment* back = segments.empty() ? nullptr : &segments.back();
        const bool continues = back && (to < 0 ? back->compute_offset < 0
                                               : back->compute_offset >= 0 && back->compute_offset + back->length == to);
        if (continues) {
          back->length += spec.numel();
        } else {
          segments.push_back({offset, spec.numel(), to});
        }
        offset += spec.numel();
        if (spec.product_operand) compute += spec.numel();
      }
  }
  return segments;
}

// Bytes of a store's segment table (a chunk's workspace in the memory plan): starts and offsets.
template <class T, class A> std::int64_t copy_segments_bytes(const ModelDesc& desc, int first, int last) {
  const std::int64_t segments = std::int64_t(copy_segments<T, A>(desc, first, last).size());
  return segments > 0 ? (2 * segments + 1) * std::int64_t(sizeof(std::int64_t)) : 0;
}

// Elements of the compute copy of layers [first, last) in A (0 when A is T: no copy).
template <class T, class A> std::int64_t compute_copy_elements(const ModelDesc& desc, int first, int last) {
  std::int64_t n = 0;
  if constexpr (mixed_precision<T, A>)
    for (int l = first; l < last; ++l)
      for (const auto& spec : desc.layers.at(l).params)
        if (spec.product_operand) n += spec.numel();
  return n;
}

// Per-tensor hashes (kpipe::xxh64 of each tensor's bytes, core/hash.hpp) of the store's values (host copy), in slot order.
template <class T, class A> std::vector<std::uint64_t> tensor_hashes(const ParameterStore<T, A>& store);

// The checksum of a whole model from its tensors' hashes in global layer order.
std::uint64_t combine_hashes(const std::vector<std::uint64_t>& hashes);

}  // namespace kpipe::model
