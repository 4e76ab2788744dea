// Generation is layout-independent: every pipeline layout of the world (1, 2 or 4 stages, and 2 chunks
// per rank where the model has room) generates, token for token, what one rank generates from the same
// weights and seed. The one-rank reference runs on MPI_COMM_SELF inside the same process.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/runtime/generator.hpp"
#include "kpipe/runtime/trainer.hpp"

#include "support/mpi_world.hpp"

namespace kpipe {
namespace {

using test::world_size;

Config generation_config(int vocab) {
  Config c;
  c.model.vocab = vocab;
  c.model.seq_len = 12;  // shorter than prompt + tokens: the window slides
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 4;
  c.model.init_std = 0.5;  // random weights with peaked logits, so that the draws differ from token to token
  c.train.batch = c.train.microbatches = 1;
  return c;
}

std::vector<Token> generate(Config c, MPI_Comm comm, int stages, int chunks, const runtime::SamplingOptions& o) {
  c.pipeline.pipeline_size = stages;
  c.pipeline.chunks = chunks;
  c.pipeline.schedule = enum_value<ScheduleKind>(chunks > 1 ? "interleaved" : "1f1b");
  c.train.batch = c.train.microbatches = stages;  // one sequence per micro-batch; interleaving needs p of them
  auto grid = comm::make_grid(comm, stages, 1);
  std::vector<Token> tokens{'T', 'h', 'e', ' '};
  {
    data::Corpus corpus;  // bytes; the trainer initializes the weights from (seed, layer, name)
    runtime::Trainer<float> trainer(c, corpus, grid);
    runtime::Generator<float> generator(trainer.stage(), trainer.plan(), corpus.tokenizer);
    generator.generate(tokens, 20, o);
  }
  comm::free_grid(grid);
  return tokens;
}

TEST(Generate, EveryLayoutGeneratesWhatOneRankGenerates) {
  for (int vocab : {256, 300}) {  // 300: a padded vocabulary, whose extra ids are never generated
    for (const double temperature : {0.0, 1.0}) {
      runtime::SamplingOptions o;
      o.temperature = temperature;
      o.top_k = temperature > 0 ? 0 : 1;
      o.seed = 11;
      const Config c = generation_config(vocab);
      const auto reference = generate(c, MPI_COMM_SELF, 1, 1, o);
      ASSERT_EQ(reference.size(), 24u);
      for (const Token t : reference) EXPECT_LT(t, 256) << "a padded id was generated";
      const auto pipelined = generate(c, MPI_COMM_WORLD, world_size(), 1, o);
      EXPECT_EQ(pipelined, reference) << "vocab " << vocab << ", temperature " << temperature;
      if (2 * world_size() <= c.model.n_layers + 2) {
        EXPECT_EQ(generate(c, MPI_COMM_WORLD, world_size(), 2, o), reference) << "two chunks per rank";
      }
    }
  }
}

TEST(Generate, TheSeedChangesTheText) {
  runtime::SamplingOptions a, b;
  a.temperature = b.temperature = 1.0;
  a.top_k = b.top_k = 0;
  a.seed = 1;
  b.seed = 2;
  const Config c = generation_config(256);
  EXPECT_NE(generate(c, MPI_COMM_WORLD, world_size(), 1, a), generate(c, MPI_COMM_WORLD, world_size(), 1, b));
}

}  // namespace
}  // namespace kpipe
