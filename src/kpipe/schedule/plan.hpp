#pragma once
// The pass pipeline: what a training configuration runs, every rewrite applied in one visible order and the
// result validated after each. kpipe-train (and its resume), kpipe-sim, the recommender, the memory plan
// and the asynchronous reference all take their lists from here, so that what is priced, planned and
// checked is what runs.
//
//   generate (pipeline.schedule, .chunks; asynchronous: the lists of a run of Horizon::steps() steps, or of
//   the rest of a resumed one) or read (pipeline.schedule_file)   -> validate
//   asked for (kpipe-sim schedule --split-backward): split_backward -> validate
//   lower (the messages)                                           -> validate
//   replicate for pipeline.data_parallel: order_reduction (pipeline.dp_reduction = ordered, groups of
//   pipeline.dp_reduction_group) or allreduce_replicas (allreduce, and every asynchronous run)
//                                                                  -> validate (replicas together)
//   stream-ordered delivery only: order_for_streams                -> validate, then the stream-order proof
//   (stream_order.hpp) with the ordered running sums on the stream, else, where there they would close a
//   cycle, with the sums by MPI from the host.
//   then every rank's buffer plan (buffers.hpp), and for a configuration the evaluation's forward-only lists.
//
// The result says how the gradient sums travel (no caller catches a failed proof to find out). Every rank
// computes the same plan (a pure function of its inputs), so every rank can plan every rank's memory, and a
// bad configuration throws the same InputError, naming the key, on every rank.
#include <cstdint>
#include <string>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/routes.hpp"
#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

struct PlanOptions {
  // > 0: an asynchronous run resumed from a checkpoint at that step boundary; its lists begin by forwarding
  // again the micro-batches in flight there (asynchronous.hpp). Synchronous lists are the same every step.
  std::int64_t first_step = 0;
  // Asynchronous lists: the steps they hold; 0: those a run executes from (Horizon::steps(), fewer for a
  // shorter run). kpipe-sim schedule --steps simulates longer runs through.
  int steps = 0;
  // Every B replaced by I then W (generate.hpp's split_backward), as a pass: kpipe-sim schedule --split-backward.
  bool split_backward = false;
};

// What a training run's evaluations run between its steps (runtime/evaluator.hpp), planned once with its lists
// and read by the evaluator and the memory plan alike: forward-only lists (forward_only.hpp) of 1 .. m
// micro-batches (m: a training step's per replica) on the run's placement, and each replica's ranks' buffer
// plans for them from the slots the training lists leave held at the end of each of their steps (an
// asynchronous run's micro-batches in flight keep theirs while it evaluates).
struct Evaluation {
  std::vector<Schedule> lists;  // [n - 1]: n micro-batches, lowered (one pipeline)
  std::vector<std::vector<std::vector<std::vector<BufferPlan>>>> buffers;  // [replica][rank][training step][n - 1]
};

struct Plan {
  Replicated run;                   // every replica's lowered lists after every pass
  SumRoute sums = SumRoute::none;   // how the replicas' gradient sums travel
  Delivery delivery = Delivery::buffered;
  std::vector<std::string> passes;  // the passes applied, in order, each validated after it ran
  // Per replica and rank: where its buffers come and go, index by index (buffers.hpp). The runtime follows
  // these, and the memory plan reads its pools from them.
  std::vector<std::vector<BufferPlan>> buffers;
  Evaluation evaluation;  // a configuration's plan only (empty for lists a caller made)
};

// The configuration's lists for a transport with this delivery (the runtime resolves pipeline.transport;
// tools take planned_delivery(pipeline.transport), routes.hpp), with their evaluation.
Plan plan(const Config& config, Delivery delivery, const PlanOptions& options = {});

// The replicas that run one pipeline's lists.
struct Replication {
  int replicas = 1;                              // pipeline.data_parallel
  DpReduction reduction = DpReduction::ordered;  // pipeline.dp_reduction
  int group = 1;                                 // pipeline.dp_reduction_group (ordered)
};

// The same pipeline of passes from one pipeline's lists that the caller made (compute-only or lowered,
// synchronous or asynchronous; a schedule file kpipe-sim reads, forward-only lists): `source` says how, and is
// the first of passes. Of the options, split_backward applies.
Plan plan(const Schedule& pipeline, const std::string& source, const Replication& replication, Delivery delivery,
          const PlanOptions& options = {});

// Whether replica `replica` receives, at every update of an asynchronous run, the running sum of the replicas
// before it into a buffer of its own (the sum in replica order; runtime/gradient_reduction.hpp allocates it,
// the memory plan counts it). Synchronous lists receive their sums into the gradients themselves.
bool holds_update_sum(const Plan& plan, int replica);

// "generate 1f1b (p = 4, m = 8) -> lower -> order_for_streams: 3 receives moved", for tools.
std::string passes_text(const Plan& plan);

}  // namespace kpipe::schedule
