#include "kpipe/schedule/reduction.hpp"

#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/interpret.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {

int Replicated::global_microbatch(int replica, int local) const {
  const int m = replicas.front().microbatches;
  if (!ordered) return replica * m + local;
  return group_of(replica, local) * group + local % group;
}

int Replicated::group_of(int replica, int local) const {
  return ordered ? (local / group) * replica_count() + replica : replica;
}

Replicated order_reduction(const Schedule& pipeline, int replicas, int group) {
  require(replicas >= 1, "pipeline.data_parallel = {}: need at least one replica", replicas);
  require(group >= 1 && pipeline.microbatches % group == 0,
          "pipeline.dp_reduction_group = {} does not divide the {} micro-batches per replica", group,
          pipeline.microbatches);
  Replicated out;
  out.ordered = replicas > 1;
  out.group = group;
  if (replicas == 1) {
    out.replicas.push_back(pipeline);
    return out;
  }
  out.replicas.resize(replicas);  // group_of needs the count
  const bool lowered = is_lowered(pipeline);
  const Schedule compute = strip_messages(pipeline);
  const int groups = replicas * pipeline.microbatches / group;
  for (int replica = 0; replica < replicas; ++replica) {
    Schedule s = compute;
    const int from = (replica + replicas - 1) % replicas, to = (replica + 1) % replicas;
    for (auto& list : s.actions) {
      std::vector<Action> rewritten;
      for (const Action& a : list) {
        if (!is_weight_gradient(a.op)) {
          rewritten.push_back(a);
          continue;
        }
        const int j = a.microbatch, q = out.group_of(replica, j);
        if (j % group == 0 && q > 0) {
          // The sum arrives right before the group's first weight gradient; a B gives its input gradient first.
          if (a.op == Op::backward) rewritten.push_back(Action{Op::backward_input, j, a.chunk, -1});
          rewritten.push_back(Action{Op::recv_sum, q, a.chunk, from});
          rewritten.push_back(Action{Op::backward_weight, j, a.chunk, -1});
        } else {
          rewritten.push_back(a);
        }
        if (j % group == group - 1 && q + 1 < groups) rewritten.push_back(Action{Op::send_sum, q + 1, a.chunk, to});
      }
      list = std::move(rewritten);
    }
    out.replicas[replica] = lowered ? lower(s) : s;
  }
  return out;
}

Replicated allreduce_replicas(const Schedule& pipeline, int replicas) {
  require(replicas >= 1, "pipeline.data_parallel = {}: need at least one replica", replicas);
  Replicated out;
  out.replicas.assign(replicas, pipeline);
  return out;
}

namespace {

[[noreturn]] void fail_at(const Schedule& s, int replica, int rank, std::size_t position, const std::string& why) {
  throw InputError(fmt::format("schedule replica {} rank {} position {} ({}): {}", replica, rank, position,
                               to_token(s.actions[rank][position], s.chunks), why));
}

// The running sum on one (replica, rank): for each chunk, which group's sum it holds as it reads its list.
void check_sum_order(const Replicated& r, int replica, int rank) {
  const Schedule& s = r.replicas[replica];
  const int groups = r.groups();
  const auto& list = s.actions[rank];
  std::vector<int> holding(s.chunks, replica == 0 ? 0 : -1), added(s.chunks, 0);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.op == Op::recv_sum) {
      const int q = a.microbatch;
      if (q <= 0 || q >= groups || r.holder(q) != replica)
        fail_at(s, replica, rank, i, fmt::format("group {} is not one of replica {}'s (groups 1..{}, round robin)", q,
                                                 replica, groups - 1));
      if (holding[a.chunk] >= 0)
        fail_at(s, replica, rank, i, fmt::format("receives a sum while it holds group {}'s", holding[a.chunk]));
      if (a.peer != r.holder(q - 1))
        fail_at(s, replica, rank, i, fmt::format("group {}'s sum comes from replica {}", q, r.holder(q - 1)));
      holding[a.chunk] = q;
      added[a.chunk] = 0;
    } else if (a.op == Op::send_sum) {
      const int q = a.microbatch;
      if (holding[a.chunk] != q - 1)
        fail_at(s, replica, rank, i, fmt::format("sends the sum for group {} without holding group {}'s", q, q - 1));
      if (added[a.chunk] != r.group)
        fail_at(s, replica, rank, i, fmt::format("sends the sum after {} of group {}'s {} weight gradients",
                                                 added[a.chunk], q - 1, r.group));
      if (q >= groups || a.peer != r.holder(q))
        fail_at(s, replica, rank, i, fmt::format("group {}'s sum goes to replica {}", q, r.holder(q)));
      holding[a.chunk] = -1;
    } else if (r.ordered && is_weight_gradient(a.op)) {
      const int q = r.group_of(replica, a.microbatch);
      if (holding[a.chunk] != q)
        fail_at(s, replica, rank, i,
                holding[a.chunk] < 0
                    ? fmt::format("weight gradient of group {} before its gradient sum arrives", q)
                    : fmt::format("weight gradient of group {} while the sum is group {}'s", q, holding[a.chunk]));
      ++added[a.chunk];
    }
  }
  for (int c = 0; c < s.chunks; ++c) {
    const int final_group = groups - 1;
    const bool keeps_final = r.ordered && r.holder(final_group) == replica;
    if (r.ordered && holding[c] != (keeps_final ? final_group : -1))
      throw InputError(fmt::format("schedule replica {} rank {}: chunk {} ends holding group {}'s sum", replica, rank, c,
                                   holding[c]));
  }
}

}  // namespace

void validate(const Replicated& r) {
  require(!r.replicas.empty(), "schedule: no replicas");
  const Schedule& first = r.replicas.front();
  for (int replica = 0; replica < r.replica_count(); ++replica) {
    const Schedule& s = r.replicas[replica];
    require(s.ranks == first.ranks && s.microbatches == first.microbatches && s.chunks == first.chunks &&
                s.placement == first.placement,
            "schedule replica {}: {} ranks, {} micro-batches, {} chunks; replica 0 has {}, {}, {}", replica, s.ranks,
            s.microbatches, s.chunks, first.ranks, first.microbatches, first.chunks);
    validate(s);
    for (int rank = 0; rank < s.ranks; ++rank) {
      if (!r.ordered)
        for (std::size_t i = 0; i < s.actions[rank].size(); ++i)
          if (is_reduction(s.actions[rank][i].op))
            fail_at(s, replica, rank, i, "a gradient sum between replicas that reduce by allreduce");
      if (r.ordered) check_sum_order(r, replica, rank);
    }
  }
  // A dry run of every replica together, the running sums as MPI carries them (interpret.hpp).
  if (r.replica_count() > 1) require_finished(interpret(r, Mode::buffered()));
}

}  // namespace kpipe::schedule
