#include "kpipe/schedule/generate.hpp"

#include <algorithm>

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

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names{"naive", "gpipe", "1f1b", "interleaved", "zb-h1"};
  return names;
}

Schedule generate(const std::string& name, int ranks, int microbatches, int chunks) {
  if (name == "naive") return naive(ranks, microbatches, chunks);
  if (name == "gpipe") return gpipe(ranks, microbatches, chunks);
  if (name == "1f1b") {
    require_one_chunk("1f1b", ranks, microbatches, chunks);
    return one_f_one_b(ranks, microbatches);
  }
  if (name == "interleaved") return interleaved(ranks, microbatches, chunks);
  if (name == "zb-h1") {
    require_one_chunk("zb-h1", ranks, microbatches, chunks);
    return zero_bubble_h1(ranks, microbatches);
  }
  throw InputError(fmt::format("pipeline.schedule = '{}': unknown schedule (naive, gpipe, 1f1b, interleaved, zb-h1)",
                               name));
}

}  // namespace kpipe::schedule
