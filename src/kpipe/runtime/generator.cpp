#include "kpipe/runtime/generator.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::runtime {

namespace {

// The plan's forward-only list of one micro-batch, from no step (nothing held).
Program one_forward(const RunPlan& plan) {
  const auto& evaluation = plan.schedule.evaluation;
  const auto& after_steps = evaluation.buffers.at(plan.replica).at(plan.stage);
  return program_of(evaluation.lists.at(0), plan.stage, after_steps.back().at(0), 0, "generation");
}

}  // namespace

template <class T, class A>
Generator<T, A>::Generator(StageModel<T, A>& stage, const RunPlan& plan, const data::Tokenizer& tokenizer)
    : stage_(&stage),
      program_(one_forward(plan)),
      transport_(comm::make_transport(plan.transport, stage.grid().pipeline, stage.config().pipeline.recv_timeout_s)),
      executor_(stage, ExecutorLinks{*transport_, stage.grid(), stage.config().pipeline.recv_timeout_s, record_, 1}),
      tokens_(1, stage.config().model.seq_len),
      losses_("kpipe::runtime::Generator::losses", 1),
      logits_("kpipe::runtime::Generator::logits", stage.config().model.vocab) {
  const auto& model = stage.config().model;
  require(tokenizer.vocab() <= model.vocab, "the tokenizer's vocabulary ({}) is larger than model.vocab = {}",
          tokenizer.vocab(), model.vocab);
  allowed_.assign(std::size_t(model.vocab), false);
  for (Token id = 0; id < model.vocab; ++id) allowed_[std::size_t(id)] = tokenizer.can_generate(id);
  require(std::any_of(allowed_.begin(), allowed_.end(), [](bool a) { return a; }),
          "the tokenizer allows no token to be generated");
  for (int c = 0; c < stage.chunks(); ++c)
    require(stage.chunk(c).rows() == model.seq_len,
            "generation runs one sequence per forward (train.batch = train.microbatches), got {} rows",
            stage.chunk(c).rows());
  // After the last virtual stage's forward, while its slot lives: the logits row of the text's last position.
  const int last_stage = program_.lists.virtual_stages() - 1;
  executor_.set_observer([this, last_stage](const schedule::Action& a, int slot) {
    if (stage_->virtual_stage(a.chunk) != last_stage) return;
    const auto logits = stage_->chunk(a.chunk).logits(slot);
    Kokkos::deep_copy(space_, logits_, Kokkos::subview(logits, length_ - 1, Kokkos::ALL));
  });
}

template <class T, class A> Generator<T, A>::~Generator() = default;

template <class T, class A>
Token Generator<T, A>::next(const std::vector<Token>& context, const SamplingOptions& options, std::int64_t position) {
  if (context.empty()) throw std::invalid_argument("kpipe::runtime::Generator::next: empty context");
  const auto& grid = stage_->grid();
  const int seq = stage_->config().model.seq_len;
  // The window: the last seq tokens at positions 0..L-1, then padding (id 0) that no real position sees; the
  // targets are not used.
  length_ = std::int64_t(std::min(context.size(), std::size_t(seq)));
  const auto draw = [&](std::int64_t, Token* inputs, Token* targets) {
    std::fill(inputs, inputs + seq, Token(0));
    std::copy(context.end() - std::ptrdiff_t(length_), context.end(), inputs);
    std::fill(targets, targets + seq, Token(0));
  };
  RowPerMicrobatch<decltype(draw)> tokens(tokens_, losses_, draw);
  // The run ends once every transfer is through (bounded, on a stream-ordered transport too).
  executor_.run(program_, whole(program_), nullptr, tokens, position);
  const int last_rank = program_.lists.rank_of(program_.lists.virtual_stages() - 1);
  Token token = 0;
  if (grid.stage == last_rank) {
    const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits_);
    std::vector<double> values(host.extent(0));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = double(host(i));
    token = sample_token(values, allowed_, options, position);
  }
  // The sampled token goes from the last stage to every rank of the pipeline (the first stage needs it next).
  comm::bcast(&token, 1, MPI_INT32_T, last_rank, grid.pipeline,
              {stage_->config().pipeline.recv_timeout_s, fmt::format("the broadcast of the token at position {}", position)});
  return token;
}

template <class T, class A>
void Generator<T, A>::generate(std::vector<Token>& tokens, int count, const SamplingOptions& options,
                            const std::function<void(Token)>& on_token) {
  for (int i = 0; i < count; ++i) {
    tokens.push_back(next(tokens, options, i));
    if (on_token) on_token(tokens.back());
  }
}

#define KPIPE_INSTANTIATE(T, A) template class Generator<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
