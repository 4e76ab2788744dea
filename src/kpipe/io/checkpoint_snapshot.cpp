// The snapshot: what a checkpoint holds, copied to host memory at a step boundary.
#include "kpipe/io/checkpoint_snapshot.hpp"

#include <fmt/format.h>

#include <optional>

#include "kpipe/core/order_free_hash.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/io/checkpoint_common.hpp"

namespace kpipe::io::detail {

template <class T, class A> std::size_t snapshot_capacity(const runtime::StageModel<T, A>& stage) {
  std::size_t elements = 0;
  for (int c = 0; c < stage.chunks() && stage.grid().replica == 0; ++c)
    elements += std::size_t(3 + stage.most_older_versions(c)) * std::size_t(stage.chunk(c).params().size());
  return elements;
}

template <class T, class A>
Snapshot<T> take_snapshot(runtime::StageModel<T, A>& stage, std::int64_t step, const data::Tokenizer& tokenizer,
                          T* memory, const ExecSpace& space) {
  stage.bind_newest();  // the parameters are the newest version (asynchronous runs)
  Snapshot<T> s;
  s.step = step;
  s.config = stage.config();
  s.model_tensors = model_tensors(stage.desc());
  s.tokenizer = &tokenizer;
  s.tokenizer_owner = stage.grid().world_rank == 0;
  s.in_place = memory == nullptr;
  s.nodes = stage.grid().nodes;
  // Replica 0's share (replicas hold identical copies), each flat buffer copied whole: one copy per buffer.
  // Where the state is host memory, its buffers are hashed for the replicas' comparison as they are copied (one
  // pass over them, not two); elsewhere the device hashes them where they are.
  const bool copies = !s.in_place && stage.grid().replica == 0;
  const bool hashed_as_copied = copies && state_in_host_memory;
  std::uint64_t mine = 0;  // this rank's share of the state hash, when hashed_as_copied
  std::size_t used = 0;
  // key: the state hash's key of the buffer's first element (runtime/replica_check.hpp); none for older versions.
  const auto copy = [&](const std::string& root, const View1<T>& from, std::optional<std::uint64_t> key,
                        const auto& slots) {
    const T* values = from.data();
    if (s.in_place && !state_in_host_memory)
      throw std::logic_error("kpipe::io::take_snapshot: in place, but the state is not in host memory");
    if (!s.in_place) {
      const Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> to(memory + used, from.extent(0));
      if (hashed_as_copied && key)
        mine += order_free_hash_copy(space, from.data(), to.data(), std::int64_t(from.extent(0)), *key,
                                     runtime::state_key_step);
      else
        Kokkos::deep_copy(space, to, from);
      values = to.data();
    }
    for (const auto& slot : slots) s.tensors.push_back({root + slot.path(), slot.spec->shape, values + slot.offset});
    if (key) s.must_be_finite.emplace_back(values, from.extent(0));
    used += from.extent(0);
  };
  for (int c = 0; c < stage.chunks() && stage.grid().replica == 0; ++c) {
    const auto& store = stage.chunk(c).params();
    const std::uint64_t key = runtime::state_key(stage, c);
    copy(model_root, store.values(), key, store.slots());
    copy(moment1_root, store.moment1(), key + 1, store.slots());
    copy(moment2_root, store.moment2(), key + 2, store.slots());
    // The older versions the micro-batches in flight read (resume forwards them again); an empty one is read
    // by no micro-batch in flight.
    for (int j = 1; j <= stage.older_versions(c, step); ++j)
      if (const View1<T> older = stage.older_version(c, j); older.extent(0) > 0)
        copy(older_version_root(j), older, std::nullopt, store.slots());
  }
  space.fence();
  s.elements = used;
  const std::string when = fmt::format("after step {}", step);
  runtime::ReplicaVerdict verdict = hashed_as_copied ? runtime::check_replicas(stage, when, mine)
                                                     : runtime::check_replicas(stage, when);
  s.state_hash = verdict.state_hash;
  s.corruption = std::move(verdict.corruption);  // then nothing of it is written
  return s;
}

template <class T, class A> std::unique_ptr<T[]> waiting_snapshot_memory(const runtime::StageModel<T, A>& stage) {
  if constexpr (state_in_host_memory) return nullptr;
  return host_buffer_for_overwrite<T>(snapshot_capacity(stage));
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template std::size_t snapshot_capacity(const runtime::StageModel<T, A>&);                                          \
  template std::unique_ptr<T[]> waiting_snapshot_memory(const runtime::StageModel<T, A>&);                           \
  template Snapshot<T> take_snapshot(runtime::StageModel<T, A>&, std::int64_t, const data::Tokenizer&,                \
                                     T*, const ExecSpace&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io::detail
