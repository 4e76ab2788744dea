#pragma once
// The weight versions one chunk of an asynchronous schedule holds (schedule/asynchronous.hpp): each held
// version is a copy in a pool of flat buffers, and the chunk's parameter buffer (what its layers read) is
// the bound one, copied in when an action reads another version. An update binds the newest version,
// changes it in place (the optimizer), and keeps a copy as the next version. A version goes back to the
// pool as soon as no micro-batch in flight or to come reads it; the pool grows to the most versions held at
// once (schedule/versions.hpp counts them from the lists: tested equal), then stays, so there is no
// allocation per micro-batch after the warm-up.
#include <functional>
#include <map>
#include <vector>

#include "kpipe/core/tensor.hpp"
#include "kpipe/model/parameters.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class WeightVersions {
 public:
  // The parameters as they are now are version `initial` (0 for a fresh run).
  WeightVersions(const ExecSpace& space, model::ParameterStore<T, A>& params, int initial = 0);

  void bind(int version);  // the parameter buffer holds `version` (held) afterwards
  int newest() const { return newest_; }
  int bound() const { return bound_; }
  // Whether a version is still read (by a micro-batch in flight or to come).
  using Needed = std::function<bool(int version)>;
  // After the optimizer changed the bound newest version in place: it is version `produced`; versions no
  // longer needed (the newest excepted) go back to the pool first.
  void commit(int produced, const Needed& needed);
  void release(const Needed& needed);  // versions not needed, the newest excepted, go back to the pool

  // Resuming: every version goes back to the pool; the parameters as they are now are version `newest`, and
  // each (version, host values) of `older` is held (a version given twice is held once).
  void restart(int newest, const std::vector<std::pair<int, const T*>>& older);
  bool holds(int version) const { return held_.count(version) > 0; }
  // Host copy of a held version.
  std::vector<T> host_copy(int version) const;

  int held() const { return int(held_.size()); }
  int peak() const { return peak_; }           // most versions held at once
  int allocated() const { return allocated_; }  // buffers in the pool's care (held or free)

 private:
  View1<T> take();

  ExecSpace space_;
  model::ParameterStore<T, A>* params_;
  std::map<int, View1<T>> held_;
  std::vector<View1<T>> free_;
  int newest_ = 0, bound_ = 0, peak_ = 0, allocated_ = 0;
};

}  // namespace kpipe::runtime
