#include "kpipe/schedule/validate.hpp"

#include <algorithm>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/interpret.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/versions.hpp"

namespace kpipe::schedule {

namespace {

// Flat index of (micro-batch, virtual stage).
struct Grid {
  int stages = 1;
  int index(int microbatch, int vstage) const { return microbatch * stages + vstage; }
};

// What one rank has done so far, per (micro-batch, virtual stage), while its list is read in order.
struct Seen {
  std::vector<char> forward, backward, input, weight, recv_activation, recv_gradient, send_activation,
      send_gradient;
  explicit Seen(std::size_t n)
      : forward(n), backward(n), input(n), weight(n), recv_activation(n), recv_gradient(n), send_activation(n),
        send_gradient(n) {}
};

std::string of_mb(const Schedule& s, const Action& a) {
  return s.chunks > 1 ? fmt::format("micro-batch {} chunk {}", a.microbatch, a.chunk)
                      : fmt::format("micro-batch {}", a.microbatch);
}

void check_shape(const Schedule& s) {
  require(s.ranks >= 1, "schedule: {} ranks (pipeline.pipeline_size must be at least 1)", s.ranks);
  require(s.microbatches >= 1, "schedule: {} micro-batches (train.microbatches must be at least 1)", s.microbatches);
  require(s.chunks >= 1, "schedule: {} chunks (pipeline.chunks must be at least 1)", s.chunks);
  require(int(s.actions.size()) == s.ranks, "schedule: {} action lists for {} ranks", s.actions.size(), s.ranks);
  require(s.steps >= 1 && (s.asynchronous() || s.steps == 1), "schedule: {} steps in the lists of a {} schedule", s.steps,
          to_string(s.updates));
  require(s.versions_at_start.empty() || int(s.versions_at_start.size()) == s.ranks,
          "schedule: versions at the start given for {} of {} ranks", s.versions_at_start.size(), s.ranks);
  for (int r = 0; r < s.ranks; ++r) {
    for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      if (a.op == Op::step) continue;
      if (is_reduction(a.op)) {  // its group and replica are checked with the replicas (reduction.hpp)
        if (a.chunk < 0 || a.chunk >= s.chunks)
          reject(s, r, i, fmt::format("chunk {} out of range ({} chunks)", a.chunk, s.chunks));
        if (a.microbatch < 0 || a.peer < 0) reject(s, r, i, "negative reduction group or replica");
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= s.microbatch_count())
        reject(s, r, i, fmt::format("micro-batch {} out of range ({} micro-batches)", a.microbatch, s.microbatch_count()));
      if (a.chunk < 0 || a.chunk >= s.chunks)
        reject(s, r, i, fmt::format("chunk {} out of range ({} chunks)", a.chunk, s.chunks));
      if (is_comm(a.op) && (a.peer < 0 || a.peer >= s.ranks))
        reject(s, r, i, fmt::format("rank {} out of range ({} ranks)", a.peer, s.ranks));
    }
  }
}

// The rank a message action must name: the neighbouring virtual stage's, which must be another rank.
void check_peer(const Schedule& s, int rank, std::size_t position, int neighbour_vstage) {
  const Action& a = s.actions[rank][position];
  const int here = s.virtual_stage(rank, a.chunk);
  const char* what = a.op == Op::send_activation || a.op == Op::recv_gradient ? "next" : "previous";
  if (neighbour_vstage < 0 || neighbour_vstage >= s.virtual_stages())
    reject(s, rank, position, fmt::format("virtual stage {} has no {} virtual stage", here, what));
  const int expected = s.rank_of(neighbour_vstage);
  if (expected == rank)
    reject(s, rank, position,
            fmt::format("virtual stages {} and {} are both on rank {}: the data is handed over locally, no message",
                        here, neighbour_vstage, rank));
  if (a.peer != expected)
    reject(s, rank, position,
            fmt::format("the {} virtual stage ({}) is on rank {}, not rank {}", what, neighbour_vstage, expected, a.peer));
}

// Checks one rank's list in order: per-action rules, then completeness.
void check_rank(const Schedule& s, int r, bool lowered) {
  const Grid grid{s.virtual_stages()};
  const int last = s.virtual_stages() - 1;
  Seen seen(std::size_t(s.microbatch_count()) * s.virtual_stages());
  std::vector<int> last_weight_mb(s.chunks, -1);  // micro-batch of the latest weight gradient per chunk
  const auto& list = s.actions[r];
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.op == Op::step) {
      // A synchronous step ends the list; asynchronous lists hold a step boundary S per step (versions.cpp
      // counts them).
      if (i + 1 != list.size() && !s.asynchronous())
        reject(s, r, i, "optimizer step before the end of the rank's actions");
      continue;
    }
    if (a.op == Op::update) continue;  // versions.cpp checks updates
    if (is_reduction(a.op)) continue;  // between replicas: checked by validate(Replicated)
    const int k = s.virtual_stage(r, a.chunk), at = grid.index(a.microbatch, k);
    const bool from_other_rank = k > 0 && s.rank_of(k - 1) != r;
    const bool grad_from_other_rank = k < last && s.rank_of(k + 1) != r;
    auto weight_gradient_in_order = [&] {
      if (a.microbatch < last_weight_mb[a.chunk])
        reject(s, r, i,
                fmt::format("gradient of micro-batch {} accumulated after micro-batch {}'s on chunk {} (gradients "
                            "accumulate in micro-batch order, for bit-reproducibility)",
                            a.microbatch, last_weight_mb[a.chunk], a.chunk));
      last_weight_mb[a.chunk] = a.microbatch;
    };
    switch (a.op) {
      case Op::forward:
        if (seen.forward[at]) reject(s, r, i, fmt::format("second forward of {}", of_mb(s, a)));
        if (lowered && from_other_rank && !seen.recv_activation[at])
          reject(s, r, i, fmt::format("forward of {} without a receive of its activation from rank {} before it",
                                       of_mb(s, a), s.rank_of(k - 1)));
        seen.forward[at] = 1;
        break;
      case Op::backward:
      case Op::backward_input:
        if (s.forward_only) reject(s, r, i, "a backward in a forward-only list");
        if (!seen.forward[at]) reject(s, r, i, fmt::format("backward of {} before its forward", of_mb(s, a)));
        if (seen.backward[at] || seen.input[at]) reject(s, r, i, fmt::format("second backward of {}", of_mb(s, a)));
        if (lowered && grad_from_other_rank && !seen.recv_gradient[at])
          reject(s, r, i, fmt::format("backward of {} without a receive of its gradient from rank {} before it",
                                       of_mb(s, a), s.rank_of(k + 1)));
        if (a.op == Op::backward) {
          weight_gradient_in_order();
          seen.backward[at] = 1;
        } else {
          seen.input[at] = 1;
        }
        break;
      case Op::backward_weight:
        if (s.forward_only) reject(s, r, i, "a backward in a forward-only list");
        if (seen.backward[at])
          reject(s, r, i, fmt::format("weight gradient of {} after its full backward B", of_mb(s, a)));
        if (!seen.input[at])
          reject(s, r, i, fmt::format("weight gradient of {} before its input gradient (I)", of_mb(s, a)));
        if (seen.weight[at]) reject(s, r, i, fmt::format("second weight gradient of {}", of_mb(s, a)));
        weight_gradient_in_order();
        seen.weight[at] = 1;
        break;
      case Op::send_activation:
        check_peer(s, r, i, k + 1);
        if (!seen.forward[at]) reject(s, r, i, fmt::format("send of the activation of {} before its forward", of_mb(s, a)));
        if (seen.send_activation[at]) reject(s, r, i, fmt::format("second send of the activation of {}", of_mb(s, a)));
        seen.send_activation[at] = 1;
        break;
      case Op::recv_activation:
        check_peer(s, r, i, k - 1);
        if (seen.forward[at])
          reject(s, r, i, fmt::format("receive of the activation of {} after its forward", of_mb(s, a)));
        if (seen.recv_activation[at])
          reject(s, r, i, fmt::format("second receive of the activation of {}", of_mb(s, a)));
        seen.recv_activation[at] = 1;
        break;
      case Op::send_gradient:
        check_peer(s, r, i, k - 1);
        if (!seen.backward[at] && !seen.input[at])
          reject(s, r, i, fmt::format("send of the gradient of {} before its backward", of_mb(s, a)));
        if (seen.send_gradient[at]) reject(s, r, i, fmt::format("second send of the gradient of {}", of_mb(s, a)));
        seen.send_gradient[at] = 1;
        break;
      case Op::recv_gradient:
        check_peer(s, r, i, k + 1);
        if (seen.backward[at] || seen.input[at])
          reject(s, r, i, fmt::format("receive of the gradient of {} after its backward", of_mb(s, a)));
        if (seen.recv_gradient[at]) reject(s, r, i, fmt::format("second receive of the gradient of {}", of_mb(s, a)));
        seen.recv_gradient[at] = 1;
        break;
      case Op::step:
      case Op::update:
      case Op::send_sum:
      case Op::recv_sum: break;
    }
  }
  require(!list.empty() && list.back().op == Op::step, "schedule rank {}: no optimizer step S at the end", r);
  for (int j = 0; j < s.microbatch_count(); ++j) {
    for (int c = 0; c < s.chunks; ++c) {
      const int at = grid.index(j, s.virtual_stage(r, c));
      const Action a{Op::forward, j, c, -1};
      require(seen.forward[at], "schedule rank {}: no forward of {}", r, of_mb(s, a));
      require(s.forward_only || seen.backward[at] || seen.input[at], "schedule rank {}: no backward of {}", r,
              of_mb(s, a));
      require(!seen.input[at] || seen.weight[at], "schedule rank {}: input gradient (I) of {} without its weight "
              "gradient (W)", r, of_mb(s, a));
    }
  }
}

// Every send has exactly one receive and every receive one send (each end is unique on its rank already).
void check_matching(const Schedule& s) {
  const Grid grid{s.virtual_stages()};
  const std::size_t n = std::size_t(s.microbatch_count()) * s.virtual_stages();
  std::vector<char> sent[2] = {std::vector<char>(n), std::vector<char>(n)};
  std::vector<char> received[2] = {std::vector<char>(n), std::vector<char>(n)};
  for (int r = 0; r < s.ranks; ++r) {
    for (const Action& a : s.actions[r]) {
      if (!is_comm(a.op)) continue;
      const Message m = message_of(s, r, a);
      (is_send(a.op) ? sent : received)[m.gradient][grid.index(m.microbatch, m.dst_vstage)] = 1;
    }
  }
  for (int r = 0; r < s.ranks; ++r) {
    for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      if (!is_comm(a.op)) continue;
      const Message m = message_of(s, r, a);
      const int at = grid.index(m.microbatch, m.dst_vstage);
      if (is_send(a.op) && !received[m.gradient][at])
        reject(s, r, i, fmt::format("send to rank {} has no matching receive there", a.peer));
      if (is_recv(a.op) && !sent[m.gradient][at])
        reject(s, r, i, fmt::format("receive from rank {} has no matching send there", a.peer));
    }
  }
}

}  // namespace

void validate(const Schedule& s) {
  check_shape(s);
  const bool lowered = is_lowered(s);
  for (int r = 0; r < s.ranks; ++r) check_rank(s, r, lowered);
  validate_versions(s);
  if (lowered) check_matching(s);
  // A dry run of every rank together, messages buffered (interpret.hpp).
  require_finished(interpret(s, Mode::buffered()));
}

std::vector<int> peak_stash(const Schedule& s) {
  std::vector<int> peaks(s.actions.size(), 0);
  for (std::size_t r = 0; r < s.actions.size(); ++r) {
    int held = 0;
    for (const Action& a : s.actions[r]) {
      if (a.op == Op::forward) peaks[r] = std::max(peaks[r], ++held);
      if (a.op == Op::backward || a.op == Op::backward_weight) --held;
    }
  }
  return peaks;
}

}  // namespace kpipe::schedule
