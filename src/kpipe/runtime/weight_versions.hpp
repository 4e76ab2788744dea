#pragma once
// The weight versions one chunk of an asynchronous schedule holds (schedule/asynchronous.hpp): each held
// version lives in buffers of the chunk's parameter layout (its values and, under mixed precision, its compute
// copy), and binding a version points the chunk's layers at its buffers (Chunk::use_parameters): nothing is
// copied. The chunk's own parameter buffers hold the first version; more come from a pool. An update reads the
// newest version and writes the next one straight into the buffers it will live in: the newest's own when
// nothing reads the newest any more (in place), a free buffer otherwise (out of place, the newest kept).
// A version goes back to the pool as soon as no micro-batch in flight or to come reads it; the pool grows to
// the most versions held at once less the chunk's own buffers (schedule/versions.hpp counts them from the
// lists: tested equal), then stays, so there is no allocation per micro-batch after the warm-up.
#include <functional>
#include <map>
#include <vector>

#include "kpipe/core/tensor.hpp"
#include "kpipe/model/chunk.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class WeightVersions {
 public:
  // The chunk's parameters as they are now are version `initial` (0 for a fresh run): its buffers become it.
  WeightVersions(const ExecSpace& space, model::Chunk<T, A>& chunk, int initial = 0);

  void bind(int version);  // the chunk's layers read `version` (held) afterwards
  int newest() const { return newest_; }
  int bound() const { return bound_; }
  // Whether a version is still read (by a micro-batch in flight or to come).
  using Needed = std::function<bool(int version)>;
  // The update that produces version `produced` from the newest: versions no longer needed go back to the pool
  // (the newest too, whose buffers then take the new version), and the chunk is bound to the buffers that
  // `produced` lives in. Returns the newest's values, which the caller's optimizer reads to write the chunk's
  // (runtime/async_rules.hpp), at once: until then `produced` is not written. They may be the chunk's own.
  View1<const T> advance(int produced, const Needed& needed);
  void release(const Needed& needed);  // versions not needed, the newest excepted, go back to the pool

  // Resuming: the chunk's parameters as they are now are version `newest`, every other version goes back to
  // the pool, and each (version, host values) of `older` is held (a version given twice is held once).
  void restart(int newest, const std::vector<std::pair<int, const T*>>& older);
  bool holds(int version) const { return held_.count(version) > 0; }
  // Host copy of a held version.
  std::vector<T> host_copy(int version) const;
  const View1<T>& values(int version) const;  // a held version's master values, where they live

  int held() const { return int(held_.size()); }
  int peak() const { return peak_; }            // most versions held at once
  int allocated() const { return allocated_; }  // buffers the pool allocated (beyond the chunk's own)

 private:
  using Buffers = model::ParameterValues<T, A>;
  Buffers take();
  const Buffers& held_buffers(int version) const;
  void use(int version);  // binds without the shortcut: the chunk reads held_[version]

  ExecSpace space_;
  model::Chunk<T, A>* chunk_;
  std::map<int, Buffers> held_;
  std::vector<Buffers> free_;
  int newest_ = 0, bound_ = 0, peak_ = 0, allocated_ = 0;
};

}  // namespace kpipe::runtime
