#include "kpipe/schedule/plan.hpp"

#include <algorithm>
#include <utility>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/asynchronous.hpp"
#include "kpipe/schedule/forward_only.hpp"
#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/lower.hpp"
#include "kpipe/schedule/stream_order.hpp"
#include "kpipe/schedule/text.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::schedule {

namespace {

struct Source {
  Schedule lists;    // one pipeline's
  std::string name;  // the first pass
};

std::string shape(const Schedule& s) {
  std::string text = fmt::format("p = {}, m = {}", s.ranks, s.microbatches);
  if (s.chunks > 1) text += fmt::format(", v = {}", s.chunks);
  if (s.asynchronous()) text += fmt::format(", {} step{}", s.steps, s.steps == 1 ? "" : "s");
  return text;
}

// No flush: the lists of a whole run of Horizon::steps() steps (asynchronous.hpp), whose middle step repeats
// in a longer run; a run shorter than that, or the rest of a resumed one, runs lists of its own length (its
// last step drains the pipeline).
Source asynchronous_source(const Config& c, int local, const PlanOptions& options) {
  const auto& p = c.pipeline;
  require(p.chunks == 1, "pipeline.chunks = {} with pipeline.schedule = \"{}\": asynchronous schedules run one chunk per "
          "rank (the version rule is per stage)", p.chunks, p.schedule);
  require(options.first_step < c.train.steps, "train.steps = {}: a run resumed at step {} has no step left to run",
          c.train.steps, options.first_step);
  const auto left = c.train.steps - options.first_step;
  const int steps =
      options.steps > 0 ? options.steps : int(std::min<std::int64_t>(Horizon{p.pipeline_size, local}.steps(), left));
  const bool resumed = options.first_step > 0;
  Source source;
  source.lists = asynchronous(updates_of(p.schedule, p.vertical_sync == 1), p.pipeline_size, local, {steps, resumed});
  source.name = resumed ? fmt::format("generate {} resumed at step {} ({})", to_string(source.lists.updates),
                                      options.first_step, shape(source.lists))
                        : fmt::format("generate {} ({})", to_string(source.lists.updates), shape(source.lists));
  return source;
}

Source synchronous_source(const Config& c, int local) {
  const auto& p = c.pipeline;
  Source source;
  if (p.schedule_file.empty()) {
    source.lists = generate(p.schedule, p.pipeline_size, local, p.chunks);
    source.name = fmt::format("generate {} ({})", p.schedule, shape(source.lists));
    return source;
  }
  const Schedule& s = source.lists = read_schedule_file(p.schedule_file, local, p.chunks);
  require(s.ranks == p.pipeline_size && s.microbatches == local && s.chunks == p.chunks,
          "pipeline.schedule_file = '{}': written for {} ranks, {} micro-batches, {} chunks; the run has {}, {}, {}",
          p.schedule_file, s.ranks, s.microbatches, s.chunks, p.pipeline_size, local, p.chunks);
  require(!s.asynchronous(), "pipeline.schedule_file = '{}': an asynchronous schedule ('updates ...'); use "
          "pipeline.schedule = \"pipedream\" or \"2bw\", whose lists the run generates", p.schedule_file);
  source.name = fmt::format("read {} ({})", p.schedule_file, shape(s));
  return source;
}

// The replicas' lists, validated together. Asynchronous replicas all run the pipeline's lists (each update
// sums their gradients); synchronous ones by the reduction asked for.
Replicated replicate(const Schedule& lowered, const Replication& replication, std::vector<std::string>& passes) {
  const int d = replication.replicas;
  const bool ordered = replication.reduction == DpReduction::ordered && !lowered.asynchronous();
  require(!lowered.asynchronous() || d == 1 || replication.group == 1,
          "pipeline.dp_reduction_group = {} with the {} schedule: asynchronous schedules sum the replicas' gradients at "
          "every update, not in groups of micro-batches", replication.group, to_string(lowered.updates));
  Replicated r = ordered ? order_reduction(lowered, d, replication.group) : allreduce_replicas(lowered, d);
  try {
    validate(r);
  } catch (const InputError& e) {
    // With several chunks per rank, groups longer than one micro-batch can make the chunks' sums wait on
    // each other; say which key to change.
    if (r.ordered && r.group > 1)
      throw InputError(fmt::format("pipeline.dp_reduction_group = {} with {} chunks per rank: {} (groups of 1 never "
                                   "wait on each other)", r.group, lowered.chunks, e.what()));
    throw;
  }
  if (d > 1)
    passes.push_back(ordered                    ? fmt::format("order_reduction ({} replicas, groups of {})", d, replication.group)
                     : lowered.asynchronous() ? fmt::format("allreduce_replicas ({} replicas; each update sums them)", d)
                                              : fmt::format("allreduce_replicas ({} replicas)", d));
  return r;
}

SumRoute sum_route(const Replicated& r, const Replication& replication) {
  if (r.replica_count() == 1) return SumRoute::none;
  if (r.ordered) return SumRoute::ordered_on_transport;
  // Asynchronous replicas sum at every update, in replica order on the transport when ordered.
  const bool in_order = r.replicas.front().asynchronous() && replication.reduction == DpReduction::ordered;
  return in_order ? SumRoute::ordered_on_transport : SumRoute::allreduce;
}

// Each receive of a list with the number of other actions before it.
std::vector<std::pair<Action, int>> placed_receives(const std::vector<Action>& list) {
  std::vector<std::pair<Action, int>> receives;
  int others = 0;
  for (const Action& a : list) {
    if (is_recv(a.op)) receives.push_back({a, others});
    else ++others;
  }
  return receives;
}

// The receives of `after` that now stand before an action they followed in `before`.
int receives_moved(const Replicated& before, const Replicated& after) {
  int moved = 0;
  for (std::size_t q = 0; q < after.replicas.size(); ++q)
    for (std::size_t r = 0; r < after.replicas[q].actions.size(); ++r) {
      const auto was = placed_receives(before.replicas[q].actions[r]);
      for (const auto& [receive, others] : placed_receives(after.replicas[q].actions[r]))
        for (const auto& [old, old_others] : was)
          if (old == receive && old_others != others) ++moved;
    }
  return moved;
}

// Stream-ordered delivery: the pass, its validation, and the proof, which decides where the ordered sums go.
void order_for_stream_delivery(Plan& plan) {
  const Replicated before = plan.run;
  plan.run = order_for_streams(plan.run);
  validate(plan.run);
  plan.passes.push_back(fmt::format("order_for_streams ({} receives moved)", receives_moved(before, plan.run)));
  std::string why = stream_order_violation(plan.run, plan.sums);
  if (!why.empty() && plan.run.ordered) {
    // On the stream a sum would close a cycle (a replica's blocked send holding up its own pipeline): the
    // sums go by MPI from the host, proved for that instead.
    why = stream_order_violation(plan.run, SumRoute::ordered_by_mpi);
    if (why.empty()) plan.sums = SumRoute::ordered_by_mpi;
  }
  require(why.empty(), "stream-ordered delivery (pipeline.transport = nccl, or auto on an NCCL build): {}", why);
}

}  // namespace

Plan plan(const Schedule& pipeline, const std::string& source, const Replication& replication, Delivery delivery,
          const PlanOptions& options) {
  Plan out;
  out.delivery = delivery;
  validate(pipeline);
  out.passes.push_back(source);
  Schedule lowered = pipeline;
  if (options.split_backward) {
    require(!pipeline.asynchronous(), "--split-backward: asynchronous schedules run whole backwards (B)");
    lowered = split_backward(pipeline);
    validate(lowered);
    out.passes.push_back("split_backward");
  }
  if (!is_lowered(lowered)) {
    lowered = lower(lowered);
    validate(lowered);
    out.passes.push_back("lower");
  }
  out.run = replicate(lowered, replication, out.passes);
  out.sums = sum_route(out.run, replication);
  if (delivery == Delivery::stream_ordered) order_for_stream_delivery(out);
  for (const Schedule& replica : out.run.replicas) {
    out.buffers.emplace_back();
    for (int rank = 0; rank < replica.ranks; ++rank)
      out.buffers.back().push_back(plan_buffers(replica, rank, replica.actions.at(rank), delivery));
  }
  return out;
}

Plan plan(const Config& c, Delivery delivery, const PlanOptions& options) {
  const auto& p = c.pipeline;
  require(c.train.microbatches % p.data_parallel == 0,
          "train.microbatches = {} is not divisible by pipeline.data_parallel = {}", c.train.microbatches,
          p.data_parallel);
  require(options.first_step >= 0, "plan: first step {} (a step boundary is not negative)", options.first_step);
  const int local = c.train.microbatches / p.data_parallel;
  const Source source = is_asynchronous(p.schedule) && p.schedule_file.empty() ? asynchronous_source(c, local, options)
                                                                                : synchronous_source(c, local);
  Plan out = plan(source.lists, source.name, Replication{p.data_parallel, p.dp_reduction, p.dp_reduction_group},
                  delivery, options);
  out.evaluation = plan_evaluation(out, local);
  return out;
}

bool holds_update_sum(const Plan& plan, int replica) {
  const bool in_order = plan.sums == SumRoute::ordered_on_transport || plan.sums == SumRoute::ordered_by_mpi;
  return plan.run.replicas.front().asynchronous() && in_order && replica > 0;
}

std::string passes_text(const Plan& plan) {
  std::string text;
  for (const auto& pass : plan.passes) text += (text.empty() ? "" : " -> ") + pass;
  return text;
}

}  // namespace kpipe::schedule
