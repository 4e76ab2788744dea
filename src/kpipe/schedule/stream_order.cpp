#include "kpipe/schedule/stream_order.hpp"

#include <functional>
#include <string>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {

namespace {

struct Position {
  int rank = -1;
  std::size_t index = 0;
};

// For every message action, its partner at the other end: the k-th send from a to b pairs with the k-th
// receive at b from a. Throws where the two sequences disagree.
std::vector<std::vector<Position>> pair_in_order(const Schedule& s) {
  const int p = s.ranks;
  // sends[a][b], receives[b][a]: positions in posting order
  std::vector<std::vector<std::vector<std::size_t>>> sends(p, std::vector<std::vector<std::size_t>>(p)), receives = sends;
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      if (is_send(a.op)) sends[r][a.peer].push_back(i);
      if (is_recv(a.op)) receives[r][a.peer].push_back(i);
    }
  std::vector<std::vector<Position>> partner(p);
  for (int r = 0; r < p; ++r) partner[r].assign(s.actions[r].size(), Position{});
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b) {
      const auto& out = sends[a][b];
      const auto& in = receives[b][a];
      for (std::size_t k = 0; k < out.size() || k < in.size(); ++k) {
        if (k >= in.size())
          reject(s, a, out[k], fmt::format("send {} to rank {} has no receive number {} from rank {} there", k, b, k, a));
        if (k >= out.size())
          reject(s, b, in[k], fmt::format("receive {} from rank {} has no send number {} to rank {} there", k, a, k, b));
        const Message sent = message_of(s, a, s.actions[a][out[k]]), got = message_of(s, b, s.actions[b][in[k]]);
        if (sent.gradient != got.gradient || sent.microbatch != got.microbatch || sent.dst_vstage != got.dst_vstage)
          throw InputError(fmt::format(
              "{}: NCCL matches messages between two ranks in posting order (it has no tags): this is receive {} from "
              "rank {}, but rank {}'s send {} to rank {} is {} (position {}); order the receives as the sends",
              position_text(s, b, in[k]), k, a, a, k, b, to_token(s.actions[a][out[k]], s.chunks), out[k]));
        partner[a][out[k]] = {b, in[k]};
        partner[b][in[k]] = {a, out[k]};
      }
    }
  return partner;
}

// The last index of the run of consecutive messages that starts at i (the executor's NCCL group). A running
// sum between replicas (another communicator) is a group of its own.
std::size_t group_end(const std::vector<Action>& list, std::size_t i) {
  if (is_reduction(list[i].op)) return i;
  while (i + 1 < list.size() && is_comm(list[i + 1].op)) ++i;
  return i;
}

// What the dry run walks: one list per process, with every message's partner. A schedule's processes are
// its ranks; a replicated schedule's are (replica, rank) = replica * ranks + rank.
struct Processes {
  std::vector<const std::vector<Action>*> lists;
  std::vector<std::vector<Position>> partner;
  bool sums = false;  // the running sums are messages (else they wait for nothing, as computations)
  bool buffered_sums = false;  // and a sum's send never waits (MPI); its receive waits for the send
  std::function<std::string(int process)> name;  // "rank 1", "replica 1 rank 0"
  std::function<std::string(int process, std::size_t index)> token;
  std::string where(int process, std::size_t index) const {
    return fmt::format("schedule {} position {} ({})", name(process), index, token(process, index));
  }
  bool message(int process, std::size_t index) const {
    const Op op = (*lists[process])[index].op;
    return is_comm(op) || (sums && is_reduction(op));
  }
};

Processes of_schedule(const Schedule& s) {
  Processes p;
  for (const auto& list : s.actions) p.lists.push_back(&list);
  p.partner = pair_in_order(s);
  p.name = [](int rank) { return fmt::format("rank {}", rank); };
  p.token = [&s](int rank, std::size_t index) { return to_token(s.actions[rank][index], s.chunks); };
  return p;
}

// A dry run of all ranks under NCCL's semantics, as far as it goes.
struct Run {
  std::vector<std::size_t> pc;        // per rank: the head of its list (size() when done)
  std::vector<std::vector<char>> met;  // per message action: it has met its partner
  bool finished = true;
};

Run simulate(const Processes& procs) {
  const int p = int(procs.lists.size());
  const auto& partner = procs.partner;
  Run run;
  run.pc.assign(p, 0);
  run.met.resize(p);
  for (int r = 0; r < p; ++r) run.met[r].assign(procs.lists[r]->size(), 0);
  // Process `at.rank` has issued the action at `at.index`: it is in the group being run.
  auto issued = [&](const Position& at) {
    const auto& list = *procs.lists[at.rank];
    const std::size_t head = run.pc[at.rank];
    return head < list.size() && head <= at.index && at.index <= group_end(list, head);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = *procs.lists[r];
      while (run.pc[r] < list.size()) {
        if (procs.buffered_sums && is_reduction(list[run.pc[r]].op)) {
          const Position& other = partner[r][run.pc[r]];
          if (list[run.pc[r]].op == Op::recv_sum && run.pc[other.rank] <= other.index) break;  // not sent yet
          run.met[r][run.pc[r]] = 1;
          ++run.pc[r];
          progress = true;
          continue;
        }
        if (!procs.message(r, run.pc[r])) {  // computations (and the step) wait for nothing in stream order
          ++run.pc[r];
          progress = true;
          continue;
        }
        const std::size_t last = group_end(list, run.pc[r]);
        bool all_met = true;
        for (std::size_t i = run.pc[r]; i <= last; ++i) {
          const Position& other = partner[r][i];
          if (!run.met[r][i] && issued(other)) run.met[r][i] = run.met[other.rank][other.index] = 1;
          all_met = all_met && run.met[r][i];
        }
        if (!all_met) break;
        run.pc[r] = last + 1;
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) run.finished = run.finished && run.pc[r] == procs.lists[r]->size();
  return run;
}

void report(const Processes& procs, const Run& run) {
  const auto& partner = procs.partner;
  std::string blocked;
  for (int r = 0; r < int(procs.lists.size()); ++r) {
    const auto& list = *procs.lists[r];
    if (run.pc[r] == list.size()) continue;
    for (std::size_t i = run.pc[r]; i <= group_end(list, run.pc[r]); ++i) {
      if (run.met[r][i]) continue;
      const Position& other = partner[r][i];
      blocked += fmt::format("{}{} waits for {} to reach position {} ({}), but that rank is held at position {}",
                             blocked.empty() ? "" : "; ", procs.where(r, i), procs.name(other.rank), other.index,
                             procs.token(other.rank, other.index), run.pc[other.rank]);
      break;
    }
  }
  require(blocked.empty(), "schedule deadlocks under NCCL (messages in stream order, sends wait for their receives): {}",
          blocked);
}

}  // namespace

void validate_stream_order(const Schedule& s) {
  require(is_lowered(s) || s.ranks == 1, "schedule: a stream-ordered transport needs the lowered schedule");
  const Processes procs = of_schedule(s);
  report(procs, simulate(procs));
}

Schedule order_for_streams(const Schedule& s) {
  Schedule out = s;
  for (;;) {
    const Processes procs = of_schedule(out);
    const auto& partner = procs.partner;
    const Run run = simulate(procs);
    if (run.finished) return out;
    // A send held in a rank's current group whose receive lies beyond the peer's current group: the receive
    // moves to the end of that group, where it meets the send. (Without a held send the deadlock is one of
    // data, which validate() reports.)
    bool moved = false;
    for (int r = 0; r < out.ranks && !moved; ++r) {
      const auto& list = out.actions[r];
      if (run.pc[r] == list.size()) continue;
      for (std::size_t i = run.pc[r]; i <= group_end(list, run.pc[r]) && !moved; ++i) {
        if (run.met[r][i] || !is_send(list[i].op)) continue;
        const Position other = partner[r][i];
        auto& theirs = out.actions[other.rank];
        if (run.pc[other.rank] == theirs.size() || !is_comm(theirs[run.pc[other.rank]].op)) continue;
        const std::size_t end = group_end(theirs, run.pc[other.rank]);
        if (other.index <= end) continue;
        const Action receive = theirs[other.index];
        theirs.erase(theirs.begin() + std::ptrdiff_t(other.index));
        theirs.insert(theirs.begin() + std::ptrdiff_t(end + 1), receive);
        moved = true;
      }
    }
    if (!moved) return out;  // validate_stream_order() says why
  }
}

Replicated order_for_streams(const Replicated& r) {
  Replicated out = r;
  for (auto& replica : out.replicas) replica = order_for_streams(replica);
  return out;
}

void validate_stream_order(const Replicated& r, SumTransport sums) {
  const int replicas = r.replica_count();
  const Schedule& first = r.replicas.front();
  const int ranks = first.ranks;
  Processes procs;
  procs.sums = true;
  procs.buffered_sums = sums == SumTransport::mpi;
  procs.partner.resize(std::size_t(replicas) * ranks);
  procs.name = [ranks](int process) { return fmt::format("replica {} rank {}", process / ranks, process % ranks); };
  procs.token = [&r, ranks](int process, std::size_t index) {
    const Schedule& s = r.replicas[process / ranks];
    return to_token(s.actions[process % ranks][index], s.chunks);
  };
  // Each replica's pipeline messages, paired within the replica.
  for (int q = 0; q < replicas; ++q) {
    const Schedule& s = r.replicas[q];
    std::vector<std::vector<Position>> partner;
    try {
      partner = pair_in_order(s);
    } catch (const InputError& e) {
      throw InputError(fmt::format("replica {}: {}", q, e.what()));
    }
    for (int rank = 0; rank < ranks; ++rank) {
      procs.lists.push_back(&s.actions[rank]);
      auto& mine = procs.partner[std::size_t(q) * ranks + rank];
      mine = partner[rank];
      for (auto& at : mine)
        if (at.rank >= 0) at.rank += q * ranks;
    }
  }
  // The running sums, on each rank's communicator of replicas: per pair of replicas and direction, the k-th
  // send meets the k-th receive (no tags), which must be the same chunk's sum for the same group.
  for (int rank = 0; rank < ranks; ++rank) {
    // sent[a][b], received[b][a]: positions in posting order
    std::vector<std::vector<std::vector<std::size_t>>> sent(replicas, std::vector<std::vector<std::size_t>>(replicas)),
        received = sent;
    for (int q = 0; q < replicas; ++q) {
      const auto& list = r.replicas[q].actions[rank];
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (list[i].op == Op::send_sum) sent[q][list[i].peer].push_back(i);
        if (list[i].op == Op::recv_sum) received[q][list[i].peer].push_back(i);
      }
    }
    if (procs.buffered_sums) {  // MPI: the tag (chunk, group) pairs them, whatever the order
      for (int a = 0; a < replicas; ++a)
        for (int b = 0; b < replicas; ++b)
          for (std::size_t i : sent[a][b]) {
            const Action& s = r.replicas[a].actions[rank][i];
            const int pa = a * ranks + rank, pb = b * ranks + rank;
            for (std::size_t j : received[b][a]) {
              const Action& g = r.replicas[b].actions[rank][j];
              if (g.chunk != s.chunk || g.microbatch != s.microbatch) continue;
              procs.partner[pa][i] = {pb, j};
              procs.partner[pb][j] = {pa, i};
            }
            require(procs.partner[pa][i].rank >= 0, "{}: no replica receives this sum", procs.where(pa, i));
          }
      continue;
    }
    for (int a = 0; a < replicas; ++a)
      for (int b = 0; b < replicas; ++b) {
        const auto& out = sent[a][b];
        const auto& in = received[b][a];
        const int pa = a * ranks + rank, pb = b * ranks + rank;
        for (std::size_t k = 0; k < out.size() || k < in.size(); ++k) {
          require(k < in.size(), "{}: sum {} to replica {} has no receive number {} from replica {} there",
                  procs.where(pa, out[k]), k, b, k, a);
          require(k < out.size(), "{}: sum {} from replica {} has no send number {} to replica {} there",
                  procs.where(pb, in[k]), k, a, k, b);
          const Action& s = (*procs.lists[pa])[out[k]];
          const Action& g = (*procs.lists[pb])[in[k]];
          require(procs.buffered_sums || (s.chunk == g.chunk && s.microbatch == g.microbatch),
                  "{}: NCCL matches messages between two ranks in posting order (it has no tags): this is receive {} "
                  "from replica {}, but that replica's send {} is {}; order the sums alike",
                  procs.where(pb, in[k]), k, a, k, procs.where(pa, out[k]));
          procs.partner[pa][out[k]] = {pb, in[k]};
          procs.partner[pb][in[k]] = {pa, out[k]};
        }
      }
  }
  report(procs, simulate(procs));
}

}  // namespace kpipe::schedule
