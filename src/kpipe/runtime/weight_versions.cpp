#include "kpipe/runtime/weight_versions.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kpipe/memory/category.hpp"

namespace kpipe::runtime {

template <class T>
WeightVersions<T>::WeightVersions(const ExecSpace& space, model::ParameterStore<T>& params, int initial)
    : space_(space), params_(&params), newest_(initial), bound_(initial) {
  View1<T> copy = take();
  Kokkos::deep_copy(space_, copy, params.values());
  held_[initial] = copy;
  peak_ = 1;
}

template <class T> View1<T> WeightVersions<T>::take() {
  if (!free_.empty()) {
    View1<T> buffer = free_.back();
    free_.pop_back();
    return buffer;
  }
  memory::Scope scope(memory::Category::weight_versions);
  ++allocated_;
  return View1<T>(uninitialized("kpipe::runtime::WeightVersions::version"), params_->values().extent(0));
}

template <class T> void WeightVersions<T>::bind(int version) {
  if (version == bound_) return;
  const auto it = held_.find(version);
  if (it == held_.end())
    throw std::logic_error("WeightVersions: version " + std::to_string(version) + " is not held (newest " +
                           std::to_string(newest_) + ")");
  Kokkos::deep_copy(space_, params_->values(), it->second);
  bound_ = version;
}

template <class T> void WeightVersions<T>::release(const Needed& needed) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->first == newest_ || needed(it->first)) {
      ++it;
      continue;
    }
    free_.push_back(it->second);
    it = held_.erase(it);
  }
}

template <class T> void WeightVersions<T>::commit(int produced, const Needed& needed) {
  if (bound_ != newest_) throw std::logic_error("WeightVersions: an update of a version that is not the newest");
  newest_ = produced;  // the former newest is an older version now
  release(needed);
  View1<T> copy = take();
  Kokkos::deep_copy(space_, copy, params_->values());
  held_[produced] = copy;
  bound_ = produced;
  peak_ = std::max(peak_, int(held_.size()));
}

template class WeightVersions<float>;
template class WeightVersions<double>;

}  // namespace kpipe::runtime
