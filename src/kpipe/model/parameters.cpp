#include "kpipe/model/parameters.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "kpipe/core/elementwise.hpp"
#include "kpipe/core/fence.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/core/rng.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/nn/optimizer.hpp"

namespace kpipe::model {

std::string TensorSlot::path() const { return fmt::format("layers/{:02d}/{}", layer, spec->name); }

template <class T, class A>
ParameterStore<T, A>::ParameterStore(const ModelDesc& desc, int first, int last)
    : desc_(&desc), first_(first), last_(last) {
  std::int64_t total = 0, compute_total = 0;
  for (int l = first; l < last; ++l)
    for (const auto& spec : desc.layers.at(l).params) {
      const bool copied = mixed_precision<T, A> && spec.product_operand;
      slots_.push_back({l, &spec, total, copied ? compute_total : -1});
      total += spec.numel();
      if (copied) compute_total += spec.numel();
    }
  {
    memory::Scope scope(memory::Category::parameters);
    values_ = View1<T>(uninitialized("kpipe::model::ParameterStore::values"), total);
    if (compute_total > 0) compute_ = View1<A>(uninitialized("kpipe::model::ParameterStore::compute"), compute_total);
  }
  {
    memory::Scope scope(memory::Category::gradients);
    grads_ = View1<T>("kpipe::model::ParameterStore::grads", total);
  }
  View1<std::uint8_t> mask;
  {
    memory::Scope scope(memory::Category::optimizer);
    moment1_ = View1<T>("kpipe::model::ParameterStore::moment1", total);
    moment2_ = View1<T>("kpipe::model::ParameterStore::moment2", total);
    mask = View1<std::uint8_t>(uninitialized("kpipe::model::ParameterStore::decay_mask"), total);
  }
  for (const auto& s : slots_)
    Kokkos::deep_copy(Kokkos::subview(mask, Kokkos::make_pair(s.offset, s.offset + s.spec->numel())),
                      std::uint8_t(s.spec->decay ? 1 : 0));
  decay_mask_ = mask;
  {
    memory::Scope scope(memory::Category::workspaces);  // chunk_bytes counts it
    layer_squares_ = View1<double>(uninitialized("kpipe::model::ParameterStore::layer_squares"), last - first);
  }
  const auto segments = copy_segments<T, A>(desc, first, last);
  if (!segments.empty()) {
    View1<std::int64_t> starts, offsets;
    {
      memory::Scope scope(memory::Category::workspaces);  // chunk_bytes counts them
      starts = View1<std::int64_t>(uninitialized("kpipe::model::ParameterStore::segment_starts"), segments.size() + 1);
      offsets = View1<std::int64_t>(uninitialized("kpipe::model::ParameterStore::segment_offsets"), segments.size());
    }
    // From host vectors, not mirrors: on a device a mirror would be an allocation outside any category.
    std::vector<std::int64_t> host_starts, host_offsets;
    for (const CopySegment& segment : segments) {
      host_starts.push_back(segment.start);
      host_offsets.push_back(segment.compute_offset);
    }
    host_starts.push_back(total);
    using HostIndices = Kokkos::View<const std::int64_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(starts, HostIndices(host_starts.data(), host_starts.size()));
    Kokkos::deep_copy(offsets, HostIndices(host_offsets.data(), host_offsets.size()));
    segment_starts_ = starts;
    segment_offsets_ = offsets;
  }
}

template <class T, class A> void ParameterStore<T, A>::initialize(const ExecSpace& space, std::uint64_t seed) {
  for (const auto& s : slots_) {
    const auto v = view1(values_, s);
    const Init init = s.spec->init;
    const double std = s.spec->std;
    const rng::Key key = rng::make_key(seed, std::uint64_t(s.layer), 0, s.spec->name);
    Kokkos::parallel_for("kpipe::model::ParameterStore::initialize", range(space, v.extent(0)),
                         KOKKOS_LAMBDA(std::int64_t i) {
                           if (init == Init::normal)
                             v(i) = T(std * rng::normal(key, std::uint64_t(i)));
                           else
                             v(i) = init == Init::ones ? T(1) : T(0);
                         });
  }
  Kokkos::deep_copy(space, moment1_, T(0));
  Kokkos::deep_copy(space, moment2_, T(0));
  zero_grads(space);
  refresh_compute_copy(space);
}

template <class T, class A> RoundedCopy ParameterStore<T, A>::rounded_copy() const {
  if constexpr (mixed_precision<T, A>) {
    static_assert(std::is_same_v<T, float> && std::is_same_v<A, bf16>, "RoundedCopy rounds float to bf16");
    return {compute_.data(), segment_starts_, segment_offsets_};
  } else {
    return {};
  }
}

template <class T, class A> void ParameterStore<T, A>::refresh_compute_copy(const ExecSpace& space) {
  if constexpr (mixed_precision<T, A>) {
    const RoundedCopy copy = rounded_copy();
    const T* const values = values_.data();
    for_each_block("kpipe::model::ParameterStore::refresh_compute_copy", space, values_.extent(0),
                   KOKKOS_LAMBDA(std::int64_t begin, std::int64_t end) { round_range(copy, values, begin, end); });
  } else {
    (void)space;
  }
}

template <class T, class A> View2<A> ParameterStore<T, A>::compute_matrix(int layer, const std::string& name) const {
  if constexpr (mixed_precision<T, A>) {
    const TensorSlot& s = find(layer, name);
    if (s.compute_offset < 0)
      throw std::logic_error(s.path() + " has no compute copy (it is not a matrix products read)");
    if (s.spec->shape.size() != 2) throw std::logic_error(s.path() + " is not a matrix");
    return View2<A>(compute_.data() + s.compute_offset, s.spec->shape[0], s.spec->shape[1]);
  } else {
    return matrix(layer, name);
  }
}

template <class T, class A> void ParameterStore<T, A>::use(const ParameterValues<T, A>& buffers) {
  if (buffers.values.extent(0) != values_.extent(0) || buffers.compute.extent(0) != compute_.extent(0))
    throw std::logic_error(fmt::format("ParameterStore::use: buffers of {} and {} elements for a store of {} and {}",
                                       buffers.values.extent(0), buffers.compute.extent(0), values_.extent(0),
                                       compute_.extent(0)));
  values_ = buffers.values;
  compute_ = buffers.compute;
}

template <class T, class A> void ParameterStore<T, A>::zero_grads(const ExecSpace& space) {
  Kokkos::deep_copy(space, grads_, T(0));
}

template <class T, class A>
void ParameterStore<T, A>::queue_layer_grad_squares(const ExecSpace& space, double* into) const {
  for (int l = first_; l < last_; ++l) {
    const auto [offset, length] = layer_range(l);
    nn::sum_squares<T>(space, View1<const T>(grads_.data() + offset, length),
                       Kokkos::subview(layer_squares_, l - first_));
  }
  using HostDoubles = Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(space, HostDoubles(into, std::size_t(last_ - first_)), layer_squares_);
}

template <class T, class A>
std::vector<double> ParameterStore<T, A>::layer_grad_squares(const ExecSpace& space) const {
  std::vector<double> sums(last_ - first_);
  queue_layer_grad_squares(space, sums.data());
  named_fence(space, "kpipe::model::ParameterStore::layer_grad_squares: the host reads the sums");
  return sums;
}

template <class T, class A>
std::pair<std::int64_t, std::int64_t> ParameterStore<T, A>::layer_range(int layer) const {
  std::int64_t begin = -1, end = -1;
  for (const auto& s : slots_)
    if (s.layer == layer) {
      if (begin < 0) begin = s.offset;
      end = s.offset + s.spec->numel();
    }
  if (begin < 0) throw std::out_of_range(fmt::format("layer {} is not in this parameter store", layer));
  return {begin, end - begin};
}

template <class T, class A> const TensorSlot& ParameterStore<T, A>::find(int layer, const std::string& name) const {
  for (const auto& s : slots_)
    if (s.layer == layer && s.spec->name == name) return s;
  throw std::out_of_range(fmt::format("no parameter layers/{:02d}/{} in this store", layer, name));
}

template <class T, class A> View1<T> ParameterStore<T, A>::view1(const View1<T>& flat, const TensorSlot& s) {
  return View1<T>(flat.data() + s.offset, s.spec->numel());
}

template <class T, class A> View2<T> ParameterStore<T, A>::view2(const View1<T>& flat, const TensorSlot& s) {
  if (s.spec->shape.size() != 2) throw std::logic_error(s.path() + " is not a matrix");
  return View2<T>(flat.data() + s.offset, s.spec->shape[0], s.spec->shape[1]);
}

template <class T, class A> std::vector<std::uint64_t> tensor_hashes(const ParameterStore<T, A>& store) {
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), store.values());
  std::vector<std::uint64_t> hashes;
  for (const auto& s : store.slots())
    hashes.push_back(xxh64(host.data() + s.offset, sizeof(T) * std::size_t(s.spec->numel())));
  return hashes;
}

std::uint64_t combine_hashes(const std::vector<std::uint64_t>& hashes) {
  return xxh64(hashes.data(), hashes.size() * sizeof(std::uint64_t));
}

#define KPIPE_INSTANTIATE(T, A) template class ParameterStore<T, A>;
#define KPIPE_INSTANTIATE_TRAINING(T, A) template std::vector<std::uint64_t> tensor_hashes(const ParameterStore<T, A>&);
KPIPE_CHECKED_PRECISIONS(KPIPE_INSTANTIATE)
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE_TRAINING)
#undef KPIPE_INSTANTIATE
#undef KPIPE_INSTANTIATE_TRAINING

}  // namespace kpipe::model
