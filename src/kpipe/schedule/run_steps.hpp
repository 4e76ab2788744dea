#pragma once
// How a run of planned lists goes, step after step, asked alike of every schedule: a synchronous run repeats
// its one step (a flush ends it); an asynchronous one runs its lists' steps on without a flush, repeating the
// template step in the middle of a long run (asynchronous.hpp). Each question has one answer for both kinds,
// here, so that the runtime, the memory plan, the partition and the tools ask it instead of which kind runs.
#include <cstdint>
#include <vector>

#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// The step of the lists that a run longer than they are repeats (step_source): 0 for synchronous lists.
int template_step(const Schedule& lists);

// The micro-batches one step forwards at most, each into a row of the staged tokens: a step's m, and p - 1
// more for an asynchronous step (its micro-batches in flight run on into the next one).
int staged_microbatches(const Schedule& lists);

// Per rank, the most micro-batches a whole run of `run_steps` steps holds at once: what the replicas' lists
// hold (validate.hpp's peak_stash), or for asynchronous lists the whole run's bound (stash_bound), which a run
// resumed at any step held before it stopped.
std::vector<int> run_stash(const Replicated& run, std::int64_t run_steps);

}  // namespace kpipe::schedule
