#include "kpipe/schedule/versions.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {

namespace {

bool reads_version(Op op) { return is_compute(op); }


}  // namespace

VersionPlan plan_versions(const Schedule& s, int rank, const std::vector<Action>& list) {
  VersionPlan plan;
  plan.free_after.resize(list.size());
  plan.keeps_base.assign(list.size(), false);
  plan.peak.assign(s.chunks, 1);
  // The last reader of each (chunk, version).
  std::vector<std::map<int, std::size_t>> last_read(s.chunks);
  for (std::size_t i = 0; i < list.size(); ++i)
    if (reads_version(list[i].op)) last_read[list[i].chunk][list[i].version] = i;
  // Walk the list holding what it holds.
  const int initial = s.initial_versions(rank);
  for (int c = 0; c < s.chunks; ++c) {
    std::set<int> held;
    for (int v = 1 - initial; v <= 0; ++v) held.insert(v);
    int newest = 0;
    auto read_later = [&](int v, std::size_t i) {
      const auto it = last_read[c].find(v);
      return it != last_read[c].end() && it->second > i;
    };
    // Versions held at the start that nobody reads go at once (the newest stays).
    for (int v = 1 - initial; v < 0; ++v)
      if (last_read[c].count(v) == 0) held.erase(v);
    plan.peak[c] = std::max(plan.peak[c], int(held.size()));
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.chunk != c || !(reads_version(a.op) || a.op == Op::update)) continue;
      if (a.op == Op::update) {
        plan.keeps_base[i] = read_later(newest, i);
        if (!plan.keeps_base[i]) held.erase(newest);
        newest = a.version;
        held.insert(newest);
        plan.peak[c] = std::max(plan.peak[c], int(held.size()) + (plan.keeps_base[i] ? 0 : 0));
        continue;
      }
      if (a.version != newest && !read_later(a.version, i) && held.count(a.version)) {
        held.erase(a.version);
        plan.free_after[i].push_back(a.version);
      }
    }
  }
  return plan;
}

std::vector<int> versions_held(const Schedule& s) {
  std::vector<int> held;
  for (int r = 0; r < s.ranks; ++r) {
    const auto plan = plan_versions(s, r, s.actions[r]);
    held.push_back(*std::max_element(plan.peak.begin(), plan.peak.end()));
  }
  return held;
}

void validate_versions(const Schedule& s) {
  if (!s.asynchronous()) {
    for (int r = 0; r < s.ranks; ++r)
      for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
        const Action& a = s.actions[r][i];
        if (a.op == Op::update)
          reject(s, r, i, "an update (U) in a synchronous schedule: its step S applies the gradients");
        if (a.version != 0) reject(s, r, i, "a weight version in a synchronous schedule (one version, 0)");
      }
    return;
  }
  const int m = s.microbatches, total = s.microbatch_count();
  // forward_version[vstage][k]: the version micro-batch k's forward read there (-inf before it ran).
  constexpr int none = -(1 << 30);
  std::vector<std::vector<int>> forward_version(s.virtual_stages(), std::vector<int>(total, none));
  for (int r = 0; r < s.ranks; ++r) {
    const auto& list = s.actions[r];
    const bool resumed = s.initial_versions(r) > 1;
    for (int c = 0; c < s.chunks; ++c) {
      const int vstage = s.virtual_stage(r, c);
      int newest = 0, last_update = -1, steps_seen = 0;
      const int oldest = 1 - s.initial_versions(r);
      std::vector<int> applied_since;  // weight gradients since the last U
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        if (a.op == Op::step) {
          // Every step ends with its micro-batches' updates applied: a checkpoint at the boundary holds a
          // whole number of steps.
          const int want = (steps_seen + 1) * m - 1;
          if (last_update != want || !applied_since.empty())
            reject(s, r, i, fmt::format("step {} ends before the update of micro-batch {} on chunk {} (a step "
                                         "boundary holds its {} micro-batches' updates)",
                                         steps_seen, want, c, m));
          ++steps_seen;
          continue;
        }
        if (a.chunk != c) continue;
        if (a.op == Op::update) {
          if (a.version != newest + 1)
            reject(s, r, i, fmt::format("produces version {}, but the newest is {} (each update produces the next)",
                                         a.version, newest));
          const int count = a.microbatch - last_update;
          if (count <= 0 || int(applied_since.size()) != count)
            reject(s, r, i, fmt::format("applies {} weight gradients, those of micro-batches {} to {} expected",
                                         applied_since.size(), last_update + 1, a.microbatch));
          for (int j = 0; j < count; ++j)
            if (applied_since[j] != last_update + 1 + j)
              reject(s, r, i, fmt::format("applies the gradient of micro-batch {} where {}'s was expected",
                                           applied_since[j], last_update + 1 + j));
          if (s.updates == Updates::two_bw ? count != m || (a.microbatch + 1) % m != 0 : count != 1)
            reject(s, r, i, s.updates == Updates::two_bw
                                 ? fmt::format("2bw updates once per window of {} micro-batches (a step's)", m)
                                 : std::string("pipedream updates after every backward (one micro-batch each)"));
          applied_since.clear();
          last_update = a.microbatch;
          newest = a.version;
          continue;
        }
        if (!is_compute(a.op)) continue;
        int& fv = forward_version[vstage][a.microbatch];
        if (a.op == Op::forward) {
          if (a.version > newest || a.version < oldest)
            reject(s, r, i, fmt::format("reads version {}, which chunk {} does not hold (versions {} to {} so far)",
                                         a.version, c, oldest, newest));
          const int want = rule_version(s.updates, s.ranks, m, vstage, a.microbatch, resumed);
          if (a.version != want)
            reject(s, r, i, fmt::format("reads version {}; the {} rule says {}", a.version, to_string(s.updates), want));
          fv = a.version;
        } else {
          if (fv != none && a.version != fv)
            reject(s, r, i, fmt::format("backward of micro-batch {} reads version {}, its forward read version {} "
                                         "(weight stashing: the same)",
                                         a.microbatch, a.version, fv));
          if (is_weight_gradient(a.op)) applied_since.push_back(a.microbatch);
        }
      }
      if (!applied_since.empty())
        throw InputError(fmt::format("schedule rank {}: the weight gradients of micro-batches {} to {} on chunk {} are "
                                     "never applied (no update U after them)",
                                     r, applied_since.front(), applied_since.back(), c));
      if (steps_seen != s.steps)
        throw InputError(fmt::format("schedule rank {}: {} step boundaries S, {} steps expected", r, steps_seen, s.steps));
    }
  }
  // Vertical sync, checked against the first stage's forwards (not the formula alone).
  if (s.updates == Updates::vertical_sync)
    for (int r = 0; r < s.ranks; ++r)
      for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
        const Action& a = s.actions[r][i];
        if (a.op != Op::forward) continue;
        const int first = forward_version[0][a.microbatch];
        if (first != a.version)
          reject(s, r, i, fmt::format("vertical sync: stage 0 read version {} for micro-batch {}, this stage {}",
                                       first, a.microbatch, a.version));
      }
  for (int r = 0; r < s.ranks; ++r) {
    const auto plan = plan_versions(s, r, s.actions[r]);
    for (int c = 0; c < s.chunks; ++c) {
      const int bound = versions_bound(s.updates, s.ranks, s.virtual_stage(r, c));
      if (plan.peak[c] > bound)
        throw InputError(fmt::format("schedule rank {}: chunk {} holds {} weight versions at once; the {} rule "
                                     "bounds it at {}",
                                     r, c, plan.peak[c], to_string(s.updates), bound));
    }
  }
}

}  // namespace kpipe::schedule
