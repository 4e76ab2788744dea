#pragma once
// Validation loss: the forwards of the validation windows down the pipeline, as forward-only lists
// (schedule/forward_only.hpp) run by the executor: train.eval_batches mini-batches of windows (at most what the
// validation split holds), shared out among the replicas micro-batch by micro-batch, the lists as long as a
// training step's micro-batches per replica, so that they reuse the step's token rows and loss slots. The
// windows, and the order their losses are added in, are the same on every layout.
#include <cstdint>
#include <map>
#include <memory>

#include "kpipe/data/corpus.hpp"
#include "kpipe/runtime/executor.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/token_staging.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class Evaluator {
 public:
  // `tokens`, `losses` (at least plan.local_microbatches rows and slots) and the pipeline's transport are lent
  // by the trainer; the lists' messages are tagged from `tag_base` on, above the training lists' tags.
  Evaluator(StageModel<T, A>& stage, const RunPlan& plan, const data::Corpus& corpus, TokenStaging& tokens,
            Kokkos::View<double*, MemSpace> losses, comm::Transport& transport, int tag_base);
  ~Evaluator();
  // Mean per-token loss over the validation windows, every rank the same (NaN when the split holds none).
  // Collective over the world; `step`, the steps done, names it in messages. Run after step `boundary` of the
  // training lists' steps, whose micro-batches in flight keep their slots (the plan's evaluation says where its
  // own go).
  double evaluate(std::int64_t step, int boundary);

 private:
  // The forward-only list of that many micro-batches, run after that step of the training lists.
  const Program& program(int microbatches, int boundary);

  StageModel<T, A>* stage_;
  const RunPlan* plan_;
  const data::Corpus* corpus_;
  TokenStaging* tokens_;
  Kokkos::View<double*, MemSpace> losses_;
  int tag_base_;
  std::map<std::pair<int, int>, Program> programs_;  // by (micro-batches, boundary)
  RunRecord record_;
  std::unique_ptr<Executor<T, A>> executor_;
};

}  // namespace kpipe::runtime
