#include "kpipe/runtime/pipeline_report.hpp"

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/message_probe.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/schedule/reduction.hpp"
#include "kpipe/schedule/simulate.hpp"
#include "kpipe/schedule/validate.hpp"

namespace kpipe::runtime {

namespace {

// What a message between neighbouring stages costs on this run's transport (comm/message_probe.hpp). The probe
// pauses as long as a forward (at most 5 ms), so that the receiver waits as it does in the run; it reuses
// the first chunk's activation buffer, whose contents no longer matter after the step.
template <class T, class A>
comm::MessageCost probe_messages(StageModel<T, A>& stage, comm::Transport& transport, double forward_s) {
  const auto& grid = stage.grid();
  if (grid.pipeline_size == 1) return {};
  auto& chunk = stage.chunk(0);
  // Stage 0's first chunk has no input buffer, every other stage's has; each is an activation message's size.
  const View2<A>& buffer = grid.stage == 0 ? chunk.output(0) : chunk.input(0);
  return comm::measure_message_cost(transport, ExecSpace{}, grid.pipeline, buffer.data(),
                                    buffer.span() * sizeof(A), std::min(forward_s, 5e-3),
                                    stage.config().pipeline.recv_timeout_s);
}

}  // namespace

template <class T, class A>
PipelineReport pipeline_report(StageModel<T, A>& stage, const RunPlan& plan, const RunRecord& record,
                               comm::Transport& transport, const schedule::RankTime& time) {
  const auto& grid = stage.grid();
  PipelineReport r;
  const int p = grid.pipeline_size;
  // Idle time counts against the whole pipeline's time, as the simulator counts it against the makespan
  // (schedule/bubble.hpp).
  const comm::Bound bound{stage.config().pipeline.recv_timeout_s, "gathering the pipeline report"};
  const auto times = comm::allgather(std::vector<double>{time.busy, time.span}, grid.pipeline, bound);
  std::vector<schedule::RankTime> ranks;
  for (std::size_t k = 0; k + 1 < times.size(); k += 2) ranks.push_back({times[k], times[k + 1]});
  r.measured_bubble = schedule::idle_fractions(ranks);
  r.peak_stash = comm::allgather(std::vector<int>{record.peak_stash}, grid.pipeline, bound);
  int slots = 0;
  for (int c = 0; c < stage.chunks(); ++c) slots += stage.chunk(c).allocated_slots();
  r.allocated_slots = comm::allgather(std::vector<int>{slots}, grid.pipeline, bound);

  // Per-action costs as each virtual stage measured them (stages differ: the first has the embedding, the
  // last the head, and a rank's chunks differ as well), with the bytes of its gradients (the replicas' running
  // sum); the report's single figures are their means over the stages that ran each kind.
  const auto& lowered = plan.lists();
  const int chunks = stage.chunks();
  constexpr std::size_t per_chunk = 5;
  std::vector<double> own(per_chunk * std::size_t(chunks));
  for (int c = 0; c < chunks; ++c) {
    const auto seconds = record.mean_action_seconds(c);
    std::copy(seconds.begin(), seconds.end(), own.begin() + per_chunk * c);
    own[per_chunk * c + 4] = double(stage.chunk(c).params().grads().span() * sizeof(T));
  }
  const std::vector<double> all = comm::allgather(own, grid.pipeline, bound);
  std::vector<schedule::Costs> costs(lowered.virtual_stages());
  std::array<double, 4> sum{}, ran{};
  for (int rank = 0; rank < p; ++rank) {
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int k = lowered.virtual_stage(rank, chunk);
      const double* c = &all[per_chunk * (std::size_t(rank) * chunks + chunk)];
      costs[k].f = c[0];
      costs[k].b = c[1];
      costs[k].i = c[2];
      costs[k].w = c[3];
      costs[k].gradient_bytes = c[4];
      for (int op = 0; op < 4; ++op)
        if (c[op] > 0) {
          sum[op] += c[op];
          ran[op] += 1;
        }
    }
  }
  r.cost_f = ran[0] > 0 ? sum[0] / ran[0] : 0;
  r.cost_b = ran[1] > 0 ? sum[1] / ran[1] : 0;
  r.cost_i = ran[2] > 0 ? sum[2] / ran[2] : 0;
  r.cost_w = ran[3] > 0 ? sum[3] / ran[3] : 0;
  r.messages = probe_messages(stage, transport, r.cost_f);
  const auto& first = stage.chunk(0);
  for (auto& c : costs) {
    c.latency = r.messages.latency;
    c.per_byte = r.messages.per_byte;
    c.activation_bytes = double(first.rows() * first.channels() * std::int64_t(sizeof(A)));
  }
  // What runs: every replica's lists with the reduction's actions, this replica's ranks reported.
  const auto sim = schedule::simulate(plan.schedule, costs);
  // The steady state's (the steps kpipe-train counts; schedule/simulate.hpp: the whole step of synchronous lists).
  const auto& idle = sim.steady_idle_fraction;
  r.simulated_bubble.assign(idle.begin() + std::ptrdiff_t(grid.replica) * p,
                            idle.begin() + std::ptrdiff_t(grid.replica + 1) * p);
  r.predicted_stash = schedule::peak_stash(lowered);
  r.measured_mean = schedule::mean_bubble(r.measured_bubble);
  r.simulated_mean = schedule::mean_bubble(r.simulated_bubble);
  return r;
}

#define KPIPE_INSTANTIATE(T, A)                                                                                       \
  template PipelineReport pipeline_report(StageModel<T, A>&, const RunPlan&, const RunRecord&, comm::Transport&,    \
                                          const schedule::RankTime&);
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
