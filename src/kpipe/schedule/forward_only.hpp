#pragma once
// Forward-only lists: what evaluation and text generation run. The forwards of `microbatches` micro-batches
// down every virtual stage of a run's placement (its ranks, chunks and where they sit), micro-batch after
// micro-batch, ending in S; no backward, no update. Each rank runs its own virtual stages of a micro-batch in
// order, so a micro-batch is one chain down the pipeline while the next one follows it: the stages overlap as
// in training's warm-up. They are schedules like any other: planned (plan.hpp: lowered, validated after each
// pass, ordered for a stream-ordered delivery and proved) and run by the same executor as training's lists
// (runtime/executor.hpp).
#include "kpipe/schedule/plan.hpp"
#include "kpipe/schedule/routes.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// The compute-only forward-only lists for `microbatches` micro-batches on `placement`'s layout, through the
// pass pipeline for `delivery`: one pipeline, no replicas (each replica evaluates on its own pipeline).
Plan forward_only(const Schedule& placement, int microbatches, Delivery delivery);

// The evaluation (plan.hpp) of a training run whose lists `training` planned: forward-only lists of 1 ..
// `microbatches` micro-batches on its placement, and their buffer plans from each step boundary's held slots.
Evaluation plan_evaluation(const Plan& training, int microbatches);

}  // namespace kpipe::schedule
