#pragma once
// Checks a schedule (compute-only or lowered) before anything runs; the first problem found throws an
// InputError that names the rank, the position (0-based index in that rank's list) and the action, e.g.
//   schedule rank 1 position 5 (B3): backward of micro-batch 3 before its forward
// What is checked:
//  - shape: one list per rank, micro-batch, chunk and peer indices in range;
//  - every (micro-batch, virtual stage) has exactly one F and either one B or one I and one W; on its rank,
//    F before B/I, I before W; the weight gradients (B or W) of a chunk in increasing micro-batch order,
//    which is what makes every schedule accumulate gradients like one rank does (bit-reproducibility);
//  - lowered form: each message is sent after the action that produces it and received before the action
//    that consumes it, to and from the ranks of the neighbouring virtual stages, and each send is matched by
//    exactly one receive; no message between virtual stages of the same rank;
//  - one optimizer step S, last on every rank;
//  - a dry run of all ranks together (sends are buffered, a receive — or, compute-only, an action whose input
//    comes from another virtual stage — waits until that input has been produced) that must finish; a
//    deadlock is reported with every blocked rank, its position, action and what it waits for.
#include <vector>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

void validate(const Schedule& s);

// Peak number of stashed activations per rank, counted per (micro-batch, chunk) from the start of its F to
// the end of its B (or of its W when the backward is split). It depends on the order only, not on timing.
std::vector<int> peak_stash(const Schedule& s);

}  // namespace kpipe::schedule
