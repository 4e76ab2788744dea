#include "kpipe/schedule/stream_order.hpp"

#include <string>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {

namespace {

struct Position {
  int rank = -1;
  std::size_t index = 0;
};

std::string where(const Schedule& s, int rank, std::size_t index) {
  return fmt::format("schedule rank {} position {} ({})", rank, index, to_token(s.actions[rank][index], s.chunks));
}

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
          throw InputError(fmt::format("{}: send {} to rank {} has no receive number {} from rank {} there", where(s, a, out[k]),
                                       k, b, k, a));
        if (k >= out.size())
          throw InputError(fmt::format("{}: receive {} from rank {} has no send number {} to rank {} there", where(s, b, in[k]),
                                       k, a, k, b));
        const Message sent = message_of(s, a, s.actions[a][out[k]]), got = message_of(s, b, s.actions[b][in[k]]);
        if (sent.gradient != got.gradient || sent.microbatch != got.microbatch || sent.dst_vstage != got.dst_vstage)
          throw InputError(fmt::format(
              "{}: NCCL matches messages between two ranks in posting order (it has no tags): this is receive {} from "
              "rank {}, but rank {}'s send {} to rank {} is {} (position {}); order the receives as the sends",
              where(s, b, in[k]), k, a, a, k, b, to_token(s.actions[a][out[k]], s.chunks), out[k]));
        partner[a][out[k]] = {b, in[k]};
        partner[b][in[k]] = {a, out[k]};
      }
    }
  return partner;
}

// The last index of the run of consecutive messages that starts at i (the executor's NCCL group).
std::size_t group_end(const std::vector<Action>& list, std::size_t i) {
  while (i + 1 < list.size() && is_comm(list[i + 1].op)) ++i;
  return i;
}

// A dry run of all ranks under NCCL's semantics, as far as it goes.
struct Run {
  std::vector<std::size_t> pc;        // per rank: the head of its list (size() when done)
  std::vector<std::vector<char>> met;  // per message action: it has met its partner
  bool finished = true;
};

Run simulate(const Schedule& s, const std::vector<std::vector<Position>>& partner) {
  const int p = s.ranks;
  Run run;
  run.pc.assign(p, 0);
  run.met.resize(p);
  for (int r = 0; r < p; ++r) run.met[r].assign(s.actions[r].size(), 0);
  // Rank `at.rank` has issued the action at `at.index`: it is in the group being run.
  auto issued = [&](const Position& at) {
    const auto& list = s.actions[at.rank];
    const std::size_t head = run.pc[at.rank];
    return head < list.size() && head <= at.index && at.index <= group_end(list, head);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = s.actions[r];
      while (run.pc[r] < list.size()) {
        if (!is_comm(list[run.pc[r]].op)) {  // computations (and the step) wait for nothing in stream order
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
  for (int r = 0; r < p; ++r) run.finished = run.finished && run.pc[r] == s.actions[r].size();
  return run;
}

void report(const Schedule& s, const std::vector<std::vector<Position>>& partner, const Run& run) {
  std::string blocked;
  for (int r = 0; r < s.ranks; ++r) {
    const auto& list = s.actions[r];
    if (run.pc[r] == list.size()) continue;
    for (std::size_t i = run.pc[r]; i <= group_end(list, run.pc[r]); ++i) {
      if (run.met[r][i]) continue;
      const Position& other = partner[r][i];
      blocked += fmt::format("{}{} waits for rank {} to reach position {} ({}), but that rank is held at position {}",
                             blocked.empty() ? "" : "; ", where(s, r, i), other.rank, other.index,
                             to_token(s.actions[other.rank][other.index], s.chunks), run.pc[other.rank]);
      break;
    }
  }
  require(blocked.empty(), "schedule deadlocks under NCCL (messages in stream order, sends wait for their receives): {}",
          blocked);
}

}  // namespace

void validate_stream_order(const Schedule& s) {
  require(is_lowered(s) || s.ranks == 1, "schedule: a stream-ordered transport needs the lowered schedule");
  const auto partner = pair_in_order(s);
  report(s, partner, simulate(s, partner));
}

Schedule order_for_streams(const Schedule& s) {
  Schedule out = s;
  for (;;) {
    const auto partner = pair_in_order(out);
    const Run run = simulate(out, partner);
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

}  // namespace kpipe::schedule
