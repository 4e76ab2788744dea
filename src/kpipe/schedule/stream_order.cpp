#include "kpipe/schedule/stream_order.hpp"

#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/interpret.hpp"

namespace kpipe::schedule {

namespace {

// The last index of the group of consecutive pipeline messages that starts at i (the interpreter's groups).
std::size_t group_end(const std::vector<Action>& list, std::size_t i) {
  while (i + 1 < list.size() && is_comm(list[i + 1].op)) ++i;
  return i;
}

// Where the receive that a held send waits for should go on the peer's list, given where the peer is held:
// before the asynchronous step boundary it waits at (`at_boundary`), or at the end of its group being run.
// None (the list's size) when the receive is not beyond that point (the deadlock is another one, which the
// proof reports).
std::size_t meeting_point(const Schedule& s, int peer, std::size_t head, std::size_t receive, bool at_boundary) {
  const auto& theirs = s.actions[peer];
  if (head >= theirs.size() || receive <= head) return theirs.size();
  if (at_boundary) return theirs[head].op == Op::step && s.asynchronous() ? head : theirs.size();
  if (!is_comm(theirs[head].op)) return theirs.size();
  const std::size_t end = group_end(theirs, head);
  return receive > end ? end + 1 : theirs.size();
}

// Moves one receive that a held send waits for to where the send meets it; false when there is none. Peers
// held at a step boundary come first: the receive then stays in the step that sends it, after everything
// else of that step, instead of holding up the peer's computations in the group it happens to be in.
bool move_a_receive(Schedule& s, const Interpretation& run) {
  for (const bool at_boundary : {true, false})
    for (const Blocked& b : run.blocked)
      for (const Unmet& u : b.unmet) {
        if (!is_send(s.actions[b.process][u.position].op)) continue;
        auto& theirs = s.actions[u.peer];
        const std::size_t to = meeting_point(s, u.peer, run.stopped_at[u.peer], u.peer_position, at_boundary);
        if (to >= theirs.size()) continue;
        const Action receive = theirs[u.peer_position];
        theirs.erase(theirs.begin() + std::ptrdiff_t(u.peer_position));
        theirs.insert(theirs.begin() + std::ptrdiff_t(to), receive);
        return true;
      }
  return false;
}

SumRoute route_of(SumTransport sums) {
  return sums == SumTransport::stream ? SumRoute::ordered_on_transport : SumRoute::ordered_by_mpi;
}

}  // namespace

Schedule order_for_streams(const Schedule& s) {
  Schedule out = s;
  for (;;) {
    const Interpretation run = interpret(out, Mode::rendezvous(SumRoute::none));
    // Finished, or messages that cannot be paired, or a deadlock without a held send (one of data, which
    // validate() reports): the proof says why.
    if (run.finished() || !run.unmatched.empty() || !move_a_receive(out, run)) return out;
  }
}

std::string stream_order_violation(const Schedule& s) {
  require(is_lowered(s) || s.ranks == 1, "schedule: a stream-ordered transport needs the lowered schedule");
  return interpret(s, Mode::rendezvous(SumRoute::none)).failure();
}

void validate_stream_order(const Schedule& s) {
  if (const std::string why = stream_order_violation(s); !why.empty()) throw InputError(why);
}

Replicated order_for_streams(const Replicated& r) {
  Replicated out = r;
  for (auto& replica : out.replicas) replica = order_for_streams(replica);
  return out;
}

std::string stream_order_violation(const Replicated& r, SumRoute sums) {
  return interpret(r, Mode::rendezvous(sums)).failure();
}

void validate_stream_order(const Replicated& r, SumRoute sums) {
  if (const std::string why = stream_order_violation(r, sums); !why.empty()) throw InputError(why);
}

void validate_stream_order(const Replicated& r, SumTransport sums) { validate_stream_order(r, route_of(sums)); }

}  // namespace kpipe::schedule
