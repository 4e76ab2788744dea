#include "kpipe/runtime/replica_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/order_free_hash.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::runtime {

namespace {

// "replica 2 (rank 5 on node n3)"
std::string replica_text(const comm::ProcessGrid& grid, int replica, int stage) {
  const int rank = replica * grid.pipeline_size + stage;
  return fmt::format("replica {} (rank {} on node {})", replica, rank, grid.node_of(rank));
}

std::string replicas_text(const std::vector<int>& replicas) {
  std::string text = replicas.size() > 1 ? "replicas " : "replica ";
  for (std::size_t k = 0; k < replicas.size(); ++k) text += (k ? ", " : "") + std::to_string(replicas[k]);
  return text;
}

}  // namespace

template <class T, class A> std::uint64_t state_key(const StageModel<T, A>& stage, int chunk) {
  std::int64_t first_element = 0;
  for (int l = 0; l < stage.chunk(chunk).params().first_layer(); ++l)
    first_element += stage.desc().layers[std::size_t(l)].num_params();
  return state_key_step * std::uint64_t(first_element);
}

template <class T, class A> std::uint64_t stage_state_hash(StageModel<T, A>& stage) {
  stage.bind_newest();  // asynchronous runs: the newest version, as a checkpoint holds it
  const ExecSpace space;
  std::uint64_t hash = 0;
  for (int c = 0; c < stage.chunks(); ++c) {
    const auto& store = stage.chunk(c).params();
    const std::uint64_t key = state_key(stage, c);
    int k = 0;
    for (const auto* buffer : {&store.values(), &store.moment1(), &store.moment2()})
      hash += order_free_hash(space, buffer->data(), std::int64_t(buffer->extent(0)), key + std::uint64_t(k++),
                              state_key_step);
  }
  return hash;
}

ReplicaVerdict judge_replicas(const std::vector<std::uint64_t>& hashes, const comm::ProcessGrid& grid,
                              const std::string& when) {
  ReplicaVerdict verdict;
  std::vector<std::string> findings;
  SilentCorruption corruption;
  for (int s = 0; s < grid.pipeline_size; ++s) {
    std::map<std::uint64_t, std::vector<int>> holders;  // hash -> the replicas holding it
    for (int r = 0; r < grid.data_parallel; ++r) holders[hashes.at(std::size_t(r * grid.pipeline_size + s))].push_back(r);
    const auto most = std::max_element(holders.begin(), holders.end(), [](const auto& a, const auto& b) {
      return a.second.size() < b.second.size();
    });
    verdict.state_hash += most->first;
    if (holders.size() == 1) continue;
    // A strict majority names the others; without one (two replicas, or a tie) every replica is named.
    const bool majority = 2 * most->second.size() > std::size_t(grid.data_parallel);
    std::vector<int> named;
    for (int r = 0; r < grid.data_parallel; ++r)
      if (!majority || std::find(most->second.begin(), most->second.end(), r) == most->second.end()) named.push_back(r);
    std::string list;
    for (std::size_t k = 0; k < named.size(); ++k)
      list += (k == 0 ? "" : k + 1 == named.size() ? " and " : ", ") + replica_text(grid, named[k], s);
    findings.push_back(majority ? fmt::format("stage {}: {} {} from {}", s, list, named.size() > 1 ? "differ" : "differs",
                                              replicas_text(most->second))
                                : fmt::format("stage {}: {} differ (no majority tells which is wrong)", s, list));
    for (int r : named) corruption.ranks.push_back(r * grid.pipeline_size + s);
  }
  if (findings.empty()) return verdict;
  std::sort(corruption.ranks.begin(), corruption.ranks.end());
  for (int rank : corruption.ranks) {
    const std::string node = grid.node_of(rank);
    if (std::find(corruption.nodes.begin(), corruption.nodes.end(), node) == corruption.nodes.end())
      corruption.nodes.push_back(node);
  }
  corruption.what = fmt::format("the replicas' weights and optimizer state differ {}: ", when);
  for (std::size_t k = 0; k < findings.size(); ++k) corruption.what += (k ? "; " : "") + findings[k];
  verdict.state_hash = 0;
  verdict.corruption = std::move(corruption);
  return verdict;
}

template <class T, class A> ReplicaVerdict check_replicas(StageModel<T, A>& stage, const std::string& when) {
  return check_replicas(stage, when, stage_state_hash(stage));
}

template <class T, class A>
ReplicaVerdict check_replicas(StageModel<T, A>& stage, const std::string& when, std::uint64_t mine) {
  const auto& grid = stage.grid();
  const auto all = comm::allgather(std::vector<std::uint64_t>{mine}, grid.world,
                                   {stage.config().pipeline.recv_timeout_s,
                                    fmt::format("the replicas' state hashes {}", when), grid.nodes});
  return judge_replicas(all, grid, when);
}

#define KPIPE_INSTANTIATE(T, A)                                     \
  template std::uint64_t stage_state_hash(StageModel<T, A>&);                        \
  template std::uint64_t state_key(const StageModel<T, A>&, int);                     \
  template ReplicaVerdict check_replicas(StageModel<T, A>&, const std::string&);      \
  template ReplicaVerdict check_replicas(StageModel<T, A>&, const std::string&, std::uint64_t);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
