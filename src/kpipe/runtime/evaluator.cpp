#include "kpipe/runtime/evaluator.hpp"

#include <algorithm>
#include <cmath>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/precisions.hpp"
#include "kpipe/data/sampler.hpp"

namespace kpipe::runtime {

template <class T, class A>
Evaluator<T, A>::Evaluator(StageModel<T, A>& stage, const RunPlan& plan, const data::Corpus& corpus,
                           TokenStaging& tokens, Kokkos::View<double*, MemSpace> losses, comm::Transport& transport,
                           int tag_base)
    : stage_(&stage), plan_(&plan), corpus_(&corpus), tokens_(&tokens), losses_(std::move(losses)),
      tag_base_(tag_base),
      executor_(std::make_unique<Executor<T, A>>(
          stage, ExecutorLinks{transport, stage.grid(), stage.config().pipeline.recv_timeout_s, record_,
                               plan.local_microbatches})) {}

template <class T, class A> Evaluator<T, A>::~Evaluator() = default;

template <class T, class A> const Program& Evaluator<T, A>::program(int microbatches, int boundary) {
  auto it = programs_.find({microbatches, boundary});
  if (it == programs_.end()) {
    const auto& evaluation = plan_->schedule.evaluation;  // planned with the run
    const int n = microbatches - 1, rank = plan_->stage;
    it = programs_
             .emplace(std::pair{microbatches, boundary},
                      program_of(evaluation.lists.at(n), rank,
                                 evaluation.buffers.at(plan_->replica).at(rank).at(boundary).at(n), tag_base_,
                                 "evaluation"))
             .first;
  }
  return it->second;
}

template <class T, class A> double Evaluator<T, A>::evaluate(std::int64_t step, int boundary) {
  stage_->bind_newest();
  const auto& config = stage_->config();
  const auto& grid = stage_->grid();
  const int seq = config.model.seq_len, mb = plan_->sequences_per_microbatch;
  const std::int64_t available = data::validation_windows(std::int64_t(corpus_->validation.size()), seq);
  std::int64_t windows = std::min<std::int64_t>(available, std::int64_t(config.train.eval_batches) * config.train.batch);
  windows -= windows % mb;
  if (windows == 0) return std::nan("");
  // Micro-batch j of replica r holds windows (j d + r) mb ..: the replicas take turns, as they always did.
  const std::int64_t microbatches = windows / mb, d = grid.data_parallel;
  const std::int64_t local = (microbatches - grid.replica + d - 1) / d;
  const auto first_window = [&](std::int64_t j) { return (j * d + grid.replica) * mb; };
  double loss_sum = 0;
  for (std::int64_t done = 0; done < local;) {
    const int n = int(std::min<std::int64_t>(plan_->local_microbatches, local - done));
    // List micro-batch k is this replica's validation micro-batch done + k.
    const auto draw = [&](std::int64_t k, Token* inputs, Token* targets) {
      data::fill_validation_windows(corpus_->validation, first_window(done + k), mb, seq, inputs, targets);
    };
    RowPerMicrobatch<decltype(draw)> tokens(*tokens_, losses_, draw);
    const Program& list = program(n, boundary);
    executor_->run(list, whole(list), nullptr, tokens, step);
    const std::vector<double> losses = tokens.read_losses(ExecSpace());
    for (int k = 0; k < n; ++k) loss_sum += losses[k];  // in window order, as on one rank
    done += n;
  }
  loss_sum = comm::allreduce(loss_sum, MPI_SUM, grid.world,
                             {config.pipeline.recv_timeout_s,
                              fmt::format("the validation-loss allreduce after step {}", step), grid.nodes});
  return loss_sum / double(windows * seq);
}

#define KPIPE_INSTANTIATE(T, A) template class Evaluator<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
