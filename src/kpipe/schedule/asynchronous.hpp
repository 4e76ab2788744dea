#pragma once
// Asynchronous pipeline schedules (PipeDream, Narayanan et al. 2019; PipeDream-2BW, 2021): no flush. Each stage
// runs 1F1B for ever, warm-up of p-1-s forwards on stage s and then one forward, one backward, and updates
// its weights while older micro-batches are still in flight; a micro-batch's backward reads the weight
// version its forward read (weight stashing), so each stage keeps a few versions.
//
// The version rule (docs/architecture.md, property 7). Micro-batches k = 0, 1, 2, ... in order; m per step;
// stage s (0-based) of p; w = p-1-s; a version is numbered by the updates applied before it (0: the
// initial weights).
//  - pipedream: an update after every backward: the backward of micro-batch k produces version k+1 from
//    version k (the newest), with k's gradient. The forward of k reads the newest version when it runs,
//    max(0, k - w); its backward the same. Stage s holds p - s versions at most.
//  - vertical_sync: the same updates, but micro-batch k reads on every stage the version stage 0 read,
//    max(0, k - (p-1)): one consistent model per micro-batch. Every stage holds p versions at most.
//  - two_bw: the micro-batches of step t form window t; its weight gradients are accumulated in micro-batch
//    order and applied once, after the window's last backward, to the newest version: W(t+1) = W(t) -
//    lr * update(gradients). Micro-batch j of window t reads on every stage the newest version the first stage
//    holds when it forwards it: W(t) for j >= p-1, W(t-1) for the first p-1 (forwarded before update t-1, the
//    warm-up forwards that cross the window's boundary), version 0 in window 0. So (p-1)/m of each window's
//    gradient is one update stale, not all of it as in the paper's rule (W(t+1) = W(t) - lr * grad f(W(t-1)),
//    measured to train far worse, docs/schedules.md); two versions per stage still suffice when m >= p
//    (required).
// Those are the versions of a run that starts at step 0. Here they are numbered from the newest version
// when the lists begin (0), so that a run resumed from a checkpoint at a step boundary reads the same rule:
// its lists begin by forwarding again the micro-batches that were in flight (warm-up forwards reading the
// older versions the checkpoint kept, numbered below 0), which recomputes their activations bit for bit.
//
// A run's steps all have the same shape but for the first ones (warm-up, the rule's max(0, ...)) and the
// last (the backwards of the micro-batches still in flight, no new forwards). So that what runs is what was
// validated (property 2), a run executes the validated lists of a run of Horizon::steps() steps, step by
// step, its middle steps repeating one step shifted by whole steps (step_source).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct AsyncOptions {
  int steps = 4;         // steps the lists hold (a whole run of that many steps)
  bool resumed = false;  // the lists continue a run at a step boundary (a checkpoint's), not from step 0
};

// The generator: one chunk per rank, compute actions (F, B, U) with their versions, S ending each step.
// Bad values throw InputError naming the key (pipeline.pipeline_size, train.microbatches: 2bw needs m >= p).
Schedule asynchronous(Updates updates, int ranks, int microbatches, const AsyncOptions& options = {});

// pipedream (with vertical_sync: Updates::vertical_sync) and 2bw's updates; flush for the others.
Updates updates_of(ScheduleKind schedule, bool vertical_sync);

// The version rule above, numbered from the newest version when the lists begin: what micro-batch k (0 at
// the lists' first) reads on virtual stage `vstage`.
int rule_version(Updates updates, int ranks, int microbatches, int vstage, int k, bool resumed);
// The versions a stage holds at most (p - s, p, 2; 2bw on one stage 1), which are also those a resumed run
// starts with.
int versions_bound(Updates updates, int ranks, int vstage);
// Versions produced per step (m for pipedream and vertical sync, 1 for 2BW).
int versions_per_step(Updates updates, int microbatches);

// Per stage, the most micro-batches an asynchronous run of `run_steps` steps holds at once (peak_stash of its
// lists from step 0): the p-1-s warm-up forwards and one more, or all the run's micro-batches where fewer. A
// property of the run, not of the lists executing it: a run resumed at any step held this before it stopped
// (the partition weighs each stage's memory with it, partition/configured.hpp).
std::vector<int> stash_bound(int ranks, int microbatches, std::int64_t run_steps);

// How many steps of lists a run is executed from, and which of them repeats: every middle step of a run is
// step `template_step()` shifted. Steps after it up to the last hold what a micro-batch forwarded in the
// template step still reads, so that what the template step frees is exactly what a run can free.
struct Horizon {
  int ranks = 1, microbatches = 1;
  int template_step() const;  // the first step past warm-up and the rule's max(0, ...)
  int steps() const;          // template, the steps a micro-batch's reads can span after it, the last step
};

// For step `index` (0-based from the run's first) of a run of `run_steps` steps executed from validated lists
// of `horizon_steps` steps: the step of those lists to run, shifted by `shift` steps. A run no longer than
// the lists runs them as they are.
struct StepSource {
  int step = 0;
  int shift = 0;
};
StepSource step_source(int horizon_steps, int template_step, int run_steps, int index);

// The action shifted by `steps` steps: micro-batches by steps * microbatches, versions by steps *
// versions_per_step, reduction groups by steps * groups_per_step.
Action shifted(const Action& a, const Schedule& s, int steps, int groups_per_step);

// [begin, end) of each step in a rank's list: a step ends with its S.
std::vector<std::pair<std::size_t, std::size_t>> step_ranges(const std::vector<Action>& list);

}  // namespace kpipe::schedule
