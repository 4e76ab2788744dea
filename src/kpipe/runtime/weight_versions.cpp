#include "kpipe/runtime/weight_versions.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kpipe/core/fence.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::runtime {

template <class T, class A>
WeightVersions<T, A>::WeightVersions(const ExecSpace& space, model::Chunk<T, A>& chunk, int initial)
    : space_(space), chunk_(&chunk), newest_(initial), bound_(initial) {
  held_[initial] = chunk.params().buffers();
  peak_ = 1;
}

template <class T, class A> typename WeightVersions<T, A>::Buffers WeightVersions<T, A>::take() {
  if (!free_.empty()) {
    Buffers buffers = free_.back();
    free_.pop_back();
    return buffers;
  }
  memory::Scope scope(memory::Category::weight_versions);
  ++allocated_;
  const auto& params = chunk_->params();
  Buffers buffers;
  buffers.values = View1<T>(uninitialized("kpipe::runtime::WeightVersions::values"), params.size());
  if (params.compute_size() > 0)
    buffers.compute = View1<A>(uninitialized("kpipe::runtime::WeightVersions::compute"), params.compute_size());
  return buffers;
}

template <class T, class A>
const typename WeightVersions<T, A>::Buffers& WeightVersions<T, A>::held_buffers(int version) const {
  const auto it = held_.find(version);
  if (it == held_.end())
    throw std::logic_error("WeightVersions: version " + std::to_string(version) + " is not held (newest " +
                           std::to_string(newest_) + ")");
  return it->second;
}

template <class T, class A> void WeightVersions<T, A>::use(int version) {
  chunk_->use_parameters(held_buffers(version));
  bound_ = version;
}

template <class T, class A> void WeightVersions<T, A>::bind(int version) {
  if (version != bound_) use(version);
}

template <class T, class A> void WeightVersions<T, A>::release(const Needed& needed) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->first == newest_ || needed(it->first)) {
      ++it;
      continue;
    }
    free_.push_back(it->second);
    it = held_.erase(it);
  }
}

template <class T, class A> View1<const T> WeightVersions<T, A>::advance(int produced, const Needed& needed) {
  if (held_.count(produced))
    throw std::logic_error("WeightVersions: version " + std::to_string(produced) + " produced twice");
  const int former = newest_;
  const Buffers from = held_buffers(former);
  newest_ = produced;  // the former newest is an older version now
  Buffers into = from;
  if (needed(former)) {
    release(needed);  // first, so that the new version may take a buffer given back now
    into = take();
  } else {
    held_.erase(former);  // its buffers take the new version: the update is in place
    release(needed);
  }
  held_[produced] = into;
  use(produced);
  peak_ = std::max(peak_, int(held_.size()));
  return from.values;
}

template <class T, class A> void WeightVersions<T, A>::restart(int newest, const std::vector<std::pair<int, const T*>>& older) {
  // The chunk's buffers are one of the pool's, held or (read last by a version given back while bound) free.
  const Buffers current = chunk_->params().buffers();
  const auto is_current = [&](const Buffers& b) { return b.values.data() == current.values.data(); };
  for (auto& entry : held_)
    if (!is_current(entry.second)) free_.push_back(entry.second);
  held_.clear();
  free_.erase(std::remove_if(free_.begin(), free_.end(), is_current), free_.end());
  held_[newest] = current;
  newest_ = bound_ = newest;
  for (const auto& [version, values] : older) {
    if (held_.count(version)) continue;
    const Buffers buffers = take();
    const Kokkos::View<const T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(values, buffers.values.extent(0));
    Kokkos::deep_copy(space_, buffers.values, host);
    held_[version] = buffers;
    if (buffers.compute.extent(0) > 0) {  // its compute copy, rounded from its values (mixed precision)
      chunk_->use_parameters(buffers);
      chunk_->params().refresh_compute_copy(space_);
    }
  }
  chunk_->use_parameters(current);
  named_fence(space_, "kpipe::runtime::WeightVersions::restart: the host copies of the older versions are read");
  peak_ = std::max(peak_, int(held_.size()));
}

template <class T, class A> const View1<T>& WeightVersions<T, A>::values(int version) const {
  return held_buffers(version).values;
}

template <class T, class A> std::vector<T> WeightVersions<T, A>::host_copy(int version) const {
  const View1<T>& buffer = values(version);
  std::vector<T> values(buffer.extent(0));
  Kokkos::deep_copy(Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(values.data(), values.size()),
                    buffer);
  return values;
}

#define KPIPE_INSTANTIATE(T, A) template class WeightVersions<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
