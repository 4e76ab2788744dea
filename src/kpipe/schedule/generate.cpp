#include "kpipe/schedule/generate.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <utility>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/lower.hpp"

namespace kpipe::schedule {

namespace {

void require_shape(int ranks, int microbatches, int chunks) {
  require(ranks >= 1, "pipeline.pipeline_size = {}: need at least one stage", ranks);
  require(microbatches >= 1, "train.microbatches = {}: need at least one micro-batch", microbatches);
  require(chunks >= 1, "pipeline.chunks = {}: need at least one chunk per rank", chunks);
}

void require_one_chunk(const char* name, int ranks, int microbatches, int chunks) {
  require_shape(ranks, microbatches, chunks);
  require(chunks == 1, "pipeline.chunks = {}: schedule '{}' runs one chunk per rank (use 'interleaved')", chunks,
          name);
}

Schedule empty_schedule(int ranks, int microbatches, int chunks) {
  Schedule s;
  s.ranks = ranks;
  s.microbatches = microbatches;
  s.chunks = chunks;
  s.actions.resize(ranks);
  return s;
}

Action compute(Op op, int microbatch, int chunk) { return Action{op, microbatch, chunk, -1}; }

void end_with_step(Schedule& s) {
  for (auto& list : s.actions) list.push_back(Action{Op::step, 0, 0, -1});
}

}  // namespace

Schedule naive(int ranks, int microbatches, int chunks) {
  require_shape(ranks, microbatches, chunks);
  Schedule s = empty_schedule(ranks, microbatches, chunks);
  const int stages = s.virtual_stages();
  for (int j = 0; j < microbatches; ++j) {
    for (int k = 0; k < stages; ++k) s.actions[s.rank_of(k)].push_back(compute(Op::forward, j, s.chunk_of(k)));
    for (int k = stages - 1; k >= 0; --k)
      s.actions[s.rank_of(k)].push_back(compute(Op::backward, j, s.chunk_of(k)));
  }
  end_with_step(s);
  return s;
}

Schedule gpipe(int ranks, int microbatches, int chunks) {
  require_shape(ranks, microbatches, chunks);
  Schedule s = empty_schedule(ranks, microbatches, chunks);
  for (auto& list : s.actions) {
    for (int c = 0; c < chunks; ++c)
      for (int j = 0; j < microbatches; ++j) list.push_back(compute(Op::forward, j, c));
    for (int c = chunks - 1; c >= 0; --c)
      for (int j = 0; j < microbatches; ++j) list.push_back(compute(Op::backward, j, c));
  }
  end_with_step(s);
  return s;
}

Schedule one_f_one_b(int ranks, int microbatches) {
  require_shape(ranks, microbatches, 1);
  Schedule s = empty_schedule(ranks, microbatches, 1);
  for (int r = 0; r < ranks; ++r) {
    auto& list = s.actions[r];
    const int warmup = std::min(ranks - 1 - r, microbatches);
    for (int j = 0; j < warmup; ++j) list.push_back(compute(Op::forward, j, 0));
    for (int j = 0; j < microbatches; ++j) {
      if (warmup + j < microbatches) list.push_back(compute(Op::forward, warmup + j, 0));
      list.push_back(compute(Op::backward, j, 0));
    }
  }
  end_with_step(s);
  return s;
}

Schedule interleaved(int ranks, int microbatches, int chunks) {
  require_shape(ranks, microbatches, chunks);
  if (chunks == 1) return one_f_one_b(ranks, microbatches);
  require(microbatches % ranks == 0,
          "train.microbatches = {}: the interleaved schedule needs a multiple of pipeline.pipeline_size = {}",
          microbatches, ranks);
  Schedule s = empty_schedule(ranks, microbatches, chunks);
  // Chunk-forwards (and chunk-backwards) of a rank are numbered k = 0 .. m*v-1: groups of p micro-batches
  // go through chunk 0, then chunk 1, ..., then the next group starts.
  const int group = ranks * chunks, total = microbatches * chunks;
  auto microbatch_of = [&](int k) { return (k / group) * ranks + k % ranks; };
  auto forward_chunk = [&](int k) { return (k % group) / ranks; };
  auto backward_chunk = [&](int k) { return chunks - 1 - (k % group) / ranks; };
  for (int r = 0; r < ranks; ++r) {
    auto& list = s.actions[r];
    // With m == p there is no steady state: every forward first (Megatron does the same).
    const int warmup =
        microbatches == ranks ? total : std::min(2 * (ranks - 1 - r) + (chunks - 1) * ranks, total);
    for (int k = 0; k < warmup; ++k) list.push_back(compute(Op::forward, microbatch_of(k), forward_chunk(k)));
    for (int k = 0; k < total; ++k) {
      const int next = warmup + k;
      if (next < total) list.push_back(compute(Op::forward, microbatch_of(next), forward_chunk(next)));
      list.push_back(compute(Op::backward, microbatch_of(k), backward_chunk(k)));
    }
  }
  end_with_step(s);
  return s;
}

Schedule zero_bubble_h1(int ranks, int microbatches) {
  require_shape(ranks, microbatches, 1);
  Schedule s = empty_schedule(ranks, microbatches, 1);
  for (int r = 0; r < ranks; ++r) {
    auto& list = s.actions[r];
    // Rank r defers each W by r micro-batches: r more activations held than 1F1B's p - r, so p at most.
    const int warmup = std::min(ranks - 1 - r, microbatches), deferral = r;
    for (int j = 0; j < warmup; ++j) list.push_back(compute(Op::forward, j, 0));
    int weights_done = 0;
    for (int j = 0; j < microbatches; ++j) {
      if (warmup + j < microbatches) list.push_back(compute(Op::forward, warmup + j, 0));
      list.push_back(compute(Op::backward_input, j, 0));
      if (j - weights_done >= deferral) list.push_back(compute(Op::backward_weight, weights_done++, 0));
    }
    while (weights_done < microbatches) list.push_back(compute(Op::backward_weight, weights_done++, 0));
  }
  end_with_step(s);
  return s;
}

// ZB-V's list scheduler, on a model clock with f = i = w = 1 per chunk (the setting ZB-V is built for):
// whenever a rank is free it runs, among the actions whose inputs are there, an I (the oldest micro-batch
// first: the previous stage waits for it), else a forward (a micro-batch already on this rank first, so it
// reaches the loss sooner; a new one only if the admission rule lets it in), else the oldest pending W,
// which fills what would be idle time. The rank with the earliest such action goes first. Both admission
// rules keep a rank's activations within 2p chunk activations (p micro-batches' worth, 1F1B's bound on its
// first rank):
//  - by micro-batches: fewer than p between their chunk-0 forward and chunk-0 W on this rank;
//  - by activations: those held, plus a chunk-1 activation for each micro-batch here that has yet to come
//    back, plus the two the new one will need, at most 2p.
// Returns the schedule and its makespan on the model clock.
namespace {

enum class Admission { microbatches, activations };

std::pair<Schedule, double> list_schedule_v(int ranks, int microbatches, Admission admission) {
  Schedule s = empty_schedule(ranks, microbatches, 2);
  s.placement = Placement::v;
  const int p = ranks, m = microbatches, stages = s.virtual_stages();
  constexpr double never = 1e300;
  std::vector<double> forward_end(std::size_t(m) * stages, never), input_end(std::size_t(m) * stages, never);
  auto at = [&](int mb, int vstage) { return std::size_t(mb) * stages + vstage; };
  struct RankState {
    double free = 0;
    int next_forward[2] = {0, 0}, next_input[2] = {0, 0};
    std::deque<std::pair<int, double>> pending_weights[2];  // (micro-batch, end of its I), oldest first
    int admitted = 0;   // micro-batches between their chunk-0 F and chunk-0 W on this rank
    int held = 0;       // chunk activations between their F and W
    int returning = 0;  // micro-batches past their chunk-0 F whose chunk-1 F is still to come
    int remaining = 0;
  };
  std::vector<RankState> state(p);
  for (auto& r : state) r.remaining = 6 * m;
  struct Choice {
    double time = never;
    Op op = Op::forward;
    int chunk = 0, microbatch = 0;
  };
  auto admits = [&](const RankState& st) {
    return admission == Admission::microbatches ? st.admitted < p : st.held + st.returning + 2 <= 2 * p;
  };
  // The action rank r runs next and when, by the priorities above (time = never: nothing can run).
  auto choose = [&](int r) {
    const RankState& st = state[r];
    struct Candidate {
      Choice choice;
      int priority;  // I 0, F 1, W 2
      double order;  // within a priority: smaller first
    };
    std::vector<Candidate> candidates;
    for (int c : {1, 0}) {
      const int k = s.virtual_stage(r, c);
      if (const int j = st.next_input[c]; j < m && forward_end[at(j, k)] < never) {
        const double ready = std::max(forward_end[at(j, k)], k + 1 < stages ? input_end[at(j, k + 1)] : 0.0);
        candidates.push_back({{ready, Op::backward_input, c, j}, 0, j * 2.0 + (1 - c)});
      }
      if (const int j = st.next_forward[c]; j < m && (c == 1 || admits(st))) {
        const double ready = k > 0 ? forward_end[at(j, k - 1)] : 0.0;
        candidates.push_back({{ready, Op::forward, c, j}, 1, (1 - c) * double(m) + j});
      }
      if (!st.pending_weights[c].empty()) {
        const auto [j, ready] = st.pending_weights[c].front();
        candidates.push_back({{ready, Op::backward_weight, c, j}, 2, ready});
      }
    }
    double earliest = never;
    for (const auto& x : candidates) earliest = std::min(earliest, std::max(st.free, x.choice.time));
    Choice best;
    int best_priority = 3;
    double best_order = 0;
    for (const auto& x : candidates) {
      if (earliest == never || std::max(st.free, x.choice.time) > earliest) continue;
      if (x.priority < best_priority || (x.priority == best_priority && x.order < best_order)) {
        best = x.choice;
        best.time = earliest;
        best_priority = x.priority;
        best_order = x.order;
      }
    }
    return best;
  };
  double makespan = 0;
  for (int left = 6 * m * p; left > 0; --left) {
    int rank = -1;
    Choice next;
    for (int r = 0; r < p; ++r) {
      if (state[r].remaining == 0) continue;
      const Choice c = choose(r);
      if (c.time < next.time || (c.time == next.time && rank >= 0 && state[r].free < state[rank].free)) {
        next = c;
        rank = r;
      }
    }
    if (rank < 0) throw std::logic_error("zero_bubble_v: no rank can run an action (a bug in the generator)");
    RankState& st = state[rank];
    const int k = s.virtual_stage(rank, next.chunk), j = next.microbatch;
    st.free = next.time + 1;
    makespan = std::max(makespan, st.free);
    --st.remaining;
    s.actions[rank].push_back(compute(next.op, j, next.chunk));
    if (next.op == Op::forward) {
      forward_end[at(j, k)] = st.free;
      ++st.next_forward[next.chunk];
      ++st.held;
      if (next.chunk == 0) ++st.admitted, ++st.returning;
      else --st.returning;
    } else if (next.op == Op::backward_input) {
      input_end[at(j, k)] = st.free;
      ++st.next_input[next.chunk];
      st.pending_weights[next.chunk].push_back({j, st.free});
    } else {
      st.pending_weights[next.chunk].pop_front();
      --st.held;
      if (next.chunk == 0) --st.admitted;
    }
  }
  end_with_step(s);
  return {s, makespan};
}

}  // namespace

// The shorter of the two admission rules' schedules (on the model clock; the first on a tie): with m a
// multiple of p both reach the bound 6m + (p - 1), otherwise the better one is within p of it.
Schedule zero_bubble_v(int ranks, int microbatches) {
  require_shape(ranks, microbatches, 2);
  auto by_microbatches = list_schedule_v(ranks, microbatches, Admission::microbatches);
  auto by_activations = list_schedule_v(ranks, microbatches, Admission::activations);
  return by_activations.second < by_microbatches.second ? by_activations.first : by_microbatches.first;
}

Schedule split_backward(const Schedule& s) {
  if (is_lowered(s)) return lower(split_backward(strip_messages(s)));
  Schedule out = s;
  for (auto& list : out.actions) {
    std::vector<Action> split;
    split.reserve(list.size());
    for (const auto& a : list) {
      if (a.op == Op::backward) {
        split.push_back(compute(Op::backward_input, a.microbatch, a.chunk));
        split.push_back(compute(Op::backward_weight, a.microbatch, a.chunk));
      } else {
        split.push_back(a);
      }
    }
    list = std::move(split);
  }
  return out;
}


Schedule generate(ScheduleKind kind, int ranks, int microbatches, int chunks) {
  switch (kind) {
    case ScheduleKind::naive: return naive(ranks, microbatches, chunks);
    case ScheduleKind::gpipe: return gpipe(ranks, microbatches, chunks);
    case ScheduleKind::one_f_one_b:
      require_one_chunk("1f1b", ranks, microbatches, chunks);
      return one_f_one_b(ranks, microbatches);
    case ScheduleKind::interleaved: return interleaved(ranks, microbatches, chunks);
    case ScheduleKind::zb_h1:
      require_one_chunk("zb-h1", ranks, microbatches, chunks);
      return zero_bubble_h1(ranks, microbatches);
    case ScheduleKind::zb_v:
      require(chunks == 2, "pipeline.chunks = {}: schedule 'zb-v' runs two chunks per rank (pipeline.chunks = 2)",
              chunks);
      return zero_bubble_v(ranks, microbatches);
    case ScheduleKind::pipedream:
    case ScheduleKind::two_bw: break;
  }
  throw InputError(fmt::format("pipeline.schedule = '{}': an asynchronous schedule (schedule/asynchronous.hpp generates "
                               "its lists)", kind));
}

Schedule generate(std::string_view name, int ranks, int microbatches, int chunks) {
  const auto kind = enum_from_string<ScheduleKind>(name);
  if (!kind || is_asynchronous(*kind))
    throw InputError(fmt::format("pipeline.schedule = '{}': unknown schedule ({})", name,
                                 fmt::join(synchronous_schedules(), ", ")));
  return generate(*kind, ranks, microbatches, chunks);
}

std::vector<ScheduleKind> synchronous_schedules() {
  std::vector<ScheduleKind> kinds;
  for (std::size_t i = 0; i < EnumText<ScheduleKind>::names.size(); ++i)
    if (!is_asynchronous(ScheduleKind(i))) kinds.push_back(ScheduleKind(i));
  return kinds;
}

}  // namespace kpipe::schedule
