#include "kpipe/runtime/generator.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/core/error.hpp"

namespace kpipe::runtime {

template <class T>
Generator<T>::Generator(Trainer<T>& trainer, const data::Tokenizer& tokenizer) : trainer_(&trainer) {
  const auto& model = trainer.config().model;
  require(tokenizer.vocab() <= model.vocab, "the tokenizer's vocabulary ({}) is larger than model.vocab = {}",
          tokenizer.vocab(), model.vocab);
  allowed_.assign(std::size_t(model.vocab), false);
  for (Token id = 0; id < model.vocab; ++id) allowed_[std::size_t(id)] = tokenizer.can_generate(id);
  require(std::any_of(allowed_.begin(), allowed_.end(), [](bool a) { return a; }),
          "the tokenizer allows no token to be generated");
  for (int c = 0; c < trainer.chunks(); ++c) {
    require(trainer.chunk(c).rows() == model.seq_len,
            "generation runs one sequence per forward (train.batch = train.microbatches), got {} rows",
            trainer.chunk(c).rows());
    slots_.push_back(trainer.chunk(c).acquire());
  }
  transport_ = &trainer.transport();
  host_tokens_ = Kokkos::View<Token*, HostSpace>("kpipe::runtime::Generator::host_tokens", model.seq_len);
}

template <class T> Generator<T>::~Generator() {
  for (std::size_t c = 0; c < slots_.size(); ++c) trainer_->chunk(int(c)).release(slots_[c]);
}

template <class T> void Generator<T>::timeout(const char* what, int peer) const {
  const auto& grid = trainer_->grid();
  std::fprintf(stderr, "kpipe: rank %d (stage %d) generating: no %s from rank %d within pipeline.recv_timeout_s = "
                       "%g s; aborting\n",
               grid.world_rank, grid.stage, what, peer, trainer_->config().pipeline.recv_timeout_s);
  std::fflush(stderr);
  MPI_Abort(grid.world, 3);
  std::abort();
}

template <class T>
Token Generator<T>::next(const std::vector<Token>& context, const SamplingOptions& options, std::int64_t position) {
  if (context.empty()) throw std::invalid_argument("kpipe::runtime::Generator::next: empty context");
  const auto& s = trainer_->schedule();
  const auto& grid = trainer_->grid();
  const int seq = trainer_->config().model.seq_len;
  const double timeout_s = trainer_->config().pipeline.recv_timeout_s;
  // The window: the last seq tokens at positions 0..L-1, then padding (id 0) that no real position sees.
  const std::size_t length = std::min(context.size(), std::size_t(seq));
  std::fill(host_tokens_.data(), host_tokens_.data() + seq, Token(0));
  std::copy(context.end() - std::ptrdiff_t(length), context.end(), host_tokens_.data());

  Token token = 0;
  const int last_stage = s.virtual_stages() - 1;
  for (int v = 0; v < s.virtual_stages(); ++v) {
    if (s.rank_of(v) != grid.stage) continue;
    const int c = s.chunk_of(v);
    auto& chunk = trainer_->chunk(c);
    const int slot = slots_[c];
    if (chunk.first()) Kokkos::deep_copy(space_, chunk.tokens(slot), host_tokens_);
    if (chunk.last()) Kokkos::deep_copy(space_, chunk.targets(slot), Token(0));  // the loss is not used
    if (v > 0) {
      const int prev = s.rank_of(v - 1);
      if (prev == grid.stage) {
        const int from = s.chunk_of(v - 1);  // V placement: not always chunk c - 1
        Kokkos::deep_copy(space_, chunk.input(slot), trainer_->chunk(from).output(slots_[from]));
      } else {
        comm::Transfer r = transport_->recv(space_, chunk.input(slot).data(), chunk.input(slot).span() * sizeof(T), prev, v);
        if (!transport_->wait(space_, r, timeout_s)) timeout("activation", prev);
      }
    }
    chunk.forward(space_, slot);
    // The host reads the logits next; on a stream-ordered transport (NCCL) this is also where a receive that
    // never comes shows, within the bound, instead of a fence that would wait forever.
    if (!transport_->synchronize(space_, timeout_s)) timeout("activation", v > 0 ? s.rank_of(v - 1) : grid.stage);
    if (v == last_stage) {
      const auto logits = chunk.layer_output(slot, trainer_->desc().layers.back().index);
      const auto row = Kokkos::subview(logits, std::int64_t(length) - 1, Kokkos::ALL);
      const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), row);
      std::vector<double> values(host.extent(0));
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = double(host(i));
      token = sample_token(values, allowed_, options, position);
    } else if (s.rank_of(v + 1) != grid.stage) {
      comm::Transfer r =
          transport_->send(space_, chunk.output(slot).data(), chunk.output(slot).span() * sizeof(T), s.rank_of(v + 1), v + 1);
      if (!transport_->wait(space_, r, timeout_s)) timeout("delivery of an activation", s.rank_of(v + 1));
    }
  }
  // The sampled token goes from the last stage to every rank of the pipeline (the first stage needs it next).
  comm::bcast(&token, 1, MPI_INT32_T, s.rank_of(last_stage), grid.pipeline,
              {timeout_s, fmt::format("the broadcast of the token at position {}", position)});
  return token;
}

template <class T>
void Generator<T>::generate(std::vector<Token>& tokens, int count, const SamplingOptions& options,
                            const std::function<void(Token)>& on_token) {
  for (int i = 0; i < count; ++i) {
    tokens.push_back(next(tokens, options, i));
    if (on_token) on_token(tokens.back());
  }
}

template class Generator<float>;
template class Generator<double>;

}  // namespace kpipe::runtime
