#pragma once
// Text generation from a trained model on any pipeline layout.
//
// Full-window recompute, not a KV cache: each new token runs the ordinary forward of one sequence (the last
// model.seq_len tokens of the text, at positions 0..L-1; the positions after L hold padding that causal
// attention keeps the real ones from seeing) down the virtual stages, as a forward-only list of one
// micro-batch (schedule/forward_only.hpp) run by the same executor as training. The last stage samples from the
// logits at position L-1 and the token goes to every rank of the pipeline. Why: it reuses the layers' kernels
// unchanged (every backend, no second attention path to keep bit-identical), the logits are the training
// forward's to the bit on every layout (so the same seed gives the same text on 1 and 2 ranks), and with
// kpipe's context lengths (a few hundred tokens) one pipelined forward per token is cheap next to the cost of a
// cache kept coherent across stages. The price: each token costs a whole window's forward, about seq_len times
// a cached step's FLOPs (benchmarks/bench_generate.cpp measures it).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kpipe/core/tensor.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/runtime/executor.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/sampling.hpp"
#include "kpipe/runtime/stage_model.hpp"
#include "kpipe/runtime/token_staging.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class Generator {
 public:
  // The stage model's chunks (built for micro-batches of one sequence: train.batch = train.microbatches) on
  // the plan's layout; the tokenizer says which ids may be generated. Collective over the pipeline where the
  // plan's transport is NCCL (its communicator is built here).
  Generator(StageModel<T, A>& stage, const RunPlan& plan, const data::Tokenizer& tokenizer);
  ~Generator();

  // The next token after `context` (non-empty; only its last seq_len tokens are seen); `position` keys the
  // random draw (the index of the token being generated). Collective: every rank of the pipeline calls it
  // with the same context and gets the same token.
  Token next(const std::vector<Token>& context, const SamplingOptions& options, std::int64_t position);

  // Appends `count` tokens to `tokens`, calling on_token(id) after each (on every rank).
  void generate(std::vector<Token>& tokens, int count, const SamplingOptions& options,
                const std::function<void(Token)>& on_token = {});

 private:
  StageModel<T, A>* stage_;
  std::vector<bool> allowed_;  // per id of the model's vocabulary
  Program program_;            // one micro-batch's forwards down the pipeline
  std::unique_ptr<comm::Transport> transport_;  // the pipeline's
  RunRecord record_;
  Executor<T, A> executor_;
  TokenStaging tokens_;
  Kokkos::View<double*, MemSpace> losses_;  // the list's loss slot (not used)
  View1<T> logits_;                         // the last stage's logits at the text's last position
  std::int64_t length_ = 0;                 // of the window being run
  ExecSpace space_;
};

}  // namespace kpipe::runtime
