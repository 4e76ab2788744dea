#pragma once
// What the checkpoint files (io/checkpoint_*.cpp) share: where a tensor's value and optimizer moments live in
// the file, the agreed failure of a collective step, the copies between a parameter buffer and the host, and
// what a loaded file must be. Internal to the io part: programs use io/checkpoint.hpp.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/tensor.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/model/desc.hpp"

namespace kpipe::io::detail {

// Where a parameter's value and its two optimizer moments live in the file.
constexpr const char* model_root = "/model/";
constexpr const char* moment1_root = "/optimizer/moment1/";
constexpr const char* moment2_root = "/optimizer/moment2/";
// Asynchronous runs: /weight_versions/<j>/<tensor> is the version j updates before the newest (/model/).
inline std::string older_version_root(int older) { return "/weight_versions/" + std::to_string(older) + "/"; }

// The UTC time as an ISO 8601 text ("2026-12-07T07:19:48Z").
std::string utc_now();

// The root, /optimizer and /training attributes of a checkpoint of `config` at `step` (every rank alike; `created`
// the UTC time of writing); T the tensors' type. save_checkpoint's, with the state hash its replicas agreed on
// (runtime/replica_check.hpp), and kpipe-import's (io/hf_import.hpp), without. `tensors` counts the whole
// model's (model_tensors).
template <class T>
void add_metadata(CheckpointWriter& writer, const Config& config, std::int64_t tensors, std::int64_t step,
                  const std::string& run_id, const std::string& created,
                  std::optional<std::uint64_t> state_hash = std::nullopt);

// How many tensors the model has: the checkpoint's "tensors" attribute.
inline std::int64_t model_tensors(const model::ModelDesc& desc) {
  std::int64_t tensors = 0;
  for (const auto& layer : desc.layers) tensors += std::int64_t(layer.params.size());
  return tensors;
}

// Runs fn on this rank, then every rank learns whether any failed and the message of the lowest failing
// rank; all throw the same error (CorruptCheckpoint or InputError). Doubles as a barrier.
void collectively(MPI_Comm world, double timeout_s, const std::string& what, const std::function<void()>& fn);

template <class T> std::vector<T> host_copy(const View1<T>& flat) {
  std::vector<T> host(flat.extent(0));
  Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> target(host.data(), host.size());
  Kokkos::deep_copy(target, flat);
  return host;
}

template <class T> void copy_to_device(const T* host, const View1<T>& flat) {
  Kokkos::View<const T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> source(host, flat.extent(0));
  Kokkos::deep_copy(flat, source);
}

// Where the state is host memory, a checkpoint is written from it and read into it (io/checkpoint_snapshot.hpp,
// checkpoint_load.cpp): no host copy of the state.
inline constexpr bool state_in_host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// Host memory that a read is about to fill: allocated, not zeroed (one pass over it fewer).
template <class T> std::unique_ptr<T[]> host_buffer_for_overwrite(std::size_t n) { return std::unique_ptr<T[]>(new T[n]); }

// What a loaded checkpoint must be: when `latest` named it, its run's and the file `latest` recorded; once
// chosen to resume from, of the step it was chosen at.
struct Expected {
  std::string run_id;               // "": any
  std::uint64_t manifest_hash = 0;  // 0: any
  std::int64_t step = -1;           // -1: any
};

// The checks every load makes of a file before reading a tensor (expected: nullptr, or what it must be).
void check_identity(const CheckpointReader& reader, const Expected* expected);

}  // namespace kpipe::io::detail
