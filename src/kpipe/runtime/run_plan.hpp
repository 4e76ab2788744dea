#pragma once
// What a run executes, computed alike on every rank before anything is allocated: every replica's lists after
// all of the schedule's passes (schedule::plan), how the replicas' gradient sums travel, the layers of every
// virtual stage, and this rank's share: its list of actions, where its buffers come and go (the plan's), and the
// steps the list holds. A pure function of the configuration, the grid and the transport; nothing here allocates or
// communicates.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/comm/transport.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/partition/partition.hpp"
#include "kpipe/schedule/buffers.hpp"
#include "kpipe/schedule/plan.hpp"

namespace kpipe::runtime {

struct RunPlan {
  schedule::Plan schedule;                    // every replica's lists, the passes applied, how sums travel
  std::vector<partition::LayerRange> ranges;  // per virtual stage: its layers
  comm::TransportKind transport = comm::TransportKind::mpi;
  int replica = 0, stage = 0;                 // this rank's place in the grid
  int local_microbatches = 1;                 // per replica and step
  int sequences_per_microbatch = 1;
  // This rank's share.
  std::vector<schedule::Action> actions;      // what it runs, in order
  std::vector<std::pair<std::size_t, std::size_t>> steps;  // [begin, end) of each step of `actions`
  int template_step = 0;                      // asynchronous: the step of the lists that repeats in a long run
  std::int64_t first_step = 0;                // the step boundary the lists start at (asynchronous: a resume's)

  const schedule::Replicated& run() const { return schedule.run; }
  const schedule::Schedule& lists() const { return schedule.run.replicas.at(replica); }  // this replica's
  // Where this rank's buffers come and go (the plan's, which the memory plan reads too).
  const schedule::BufferPlan& buffers() const { return schedule.buffers.at(replica).at(stage); }
  // The micro-batch of the whole mini-batch that this replica's local micro-batch is.
  int global_microbatch(int local) const { return schedule.run.global_microbatch(replica, local); }
};

// The plan of `config` on `grid` with its messages on `transport`, from one call of schedule::plan; for an
// asynchronous run resumed at step boundary `first_step` (> 0, below train.steps), the lists that continue it
// (synchronous lists are every step's). InputError (the same on every rank) when the schedule or the layout
// cannot run.
RunPlan plan_run(const Config& config, const model::ModelDesc& desc, const comm::ProcessGrid& grid,
                 comm::TransportKind transport, std::int64_t first_step = 0);

// What the replicas' gradient sums travel by: the run's transport, or MPI from the host where the plan found
// that sums on the stream would close a cycle.
inline comm::TransportKind sum_transport(const RunPlan& plan) {
  return plan.schedule.sums == schedule::SumRoute::ordered_by_mpi ? comm::TransportKind::mpi : plan.transport;
}

// How a transport delivers messages, as the schedule's passes and proofs see it.
constexpr schedule::Delivery delivery_of(comm::TransportKind kind) {
  return comm::stream_ordered(kind) ? schedule::Delivery::stream_ordered : schedule::Delivery::buffered;
}

}  // namespace kpipe::runtime
