#include "kpipe/runtime/weight_versions.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kpipe/core/memory_category.hpp"

namespace kpipe::runtime {

template <class T, class A>
WeightVersions<T, A>::WeightVersions(const ExecSpace& space, model::ParameterStore<T, A>& params, int initial)
    : space_(space), params_(&params), newest_(initial), bound_(initial) {
  View1<T> copy = take();
  Kokkos::deep_copy(space_, copy, params.values());
  held_[initial] = copy;
  peak_ = 1;
}

template <class T, class A> View1<T> WeightVersions<T, A>::take() {
  if (!free_.empty()) {
    View1<T> buffer = free_.back();
    free_.pop_back();
    return buffer;
  }
  memory::Scope scope(memory::Category::weight_versions);
  ++allocated_;
  return View1<T>(uninitialized("kpipe::runtime::WeightVersions::version"), params_->values().extent(0));
}

template <class T, class A> void WeightVersions<T, A>::bind(int version) {
  if (version == bound_) return;
  const auto it = held_.find(version);
  if (it == held_.end())
    throw std::logic_error("WeightVersions: version " + std::to_string(version) + " is not held (newest " +
                           std::to_string(newest_) + ")");
  Kokkos::deep_copy(space_, params_->values(), it->second);
  params_->refresh_compute_copy(space_);  // what the products read (mixed precision)
  bound_ = version;
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

template <class T, class A> void WeightVersions<T, A>::commit(int produced, const Needed& needed) {
  if (bound_ != newest_) throw std::logic_error("WeightVersions: an update of a version that is not the newest");
  newest_ = produced;  // the former newest is an older version now
  release(needed);
  View1<T> copy = take();
  Kokkos::deep_copy(space_, copy, params_->values());
  held_[produced] = copy;
  bound_ = produced;
  peak_ = std::max(peak_, int(held_.size()));
}

template <class T, class A> void WeightVersions<T, A>::restart(int newest, const std::vector<std::pair<int, const T*>>& older) {
  for (auto& entry : held_) free_.push_back(entry.second);
  held_.clear();
  View1<T> copy = take();
  Kokkos::deep_copy(space_, copy, params_->values());
  held_[newest] = copy;
  newest_ = bound_ = newest;
  for (const auto& [version, values] : older) {
    if (held_.count(version)) continue;
    View1<T> buffer = take();
    const Kokkos::View<const T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(values, buffer.extent(0));
    Kokkos::deep_copy(space_, buffer, host);
    held_[version] = buffer;
  }
  space_.fence();
  peak_ = std::max(peak_, int(held_.size()));
}

template <class T, class A> std::vector<T> WeightVersions<T, A>::host_copy(int version) const {
  const auto it = held_.find(version);
  if (it == held_.end())
    throw std::logic_error("WeightVersions: version " + std::to_string(version) + " is not held (newest " +
                           std::to_string(newest_) + ")");
  std::vector<T> values(it->second.extent(0));
  Kokkos::deep_copy(Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(values.data(), values.size()),
                    it->second);
  return values;
}

template class WeightVersions<float>;
template class WeightVersions<double>;
template class WeightVersions<float, bf16>;

}  // namespace kpipe::runtime
