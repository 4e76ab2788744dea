#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/nn/embedding.hpp"
#include "support/gradcheck.hpp"

namespace kpipe::nn {
namespace {

template <class T> Embedding<T> make_embedding(int vocab, int positions, int channels) {
  return Embedding<T>{View2<T>("token", vocab, channels), View2<T>("position", positions, channels),
                      View2<T>("dtoken", vocab, channels), View2<T>("dposition", positions, channels)};
}

View1<Token> make_tokens(const std::vector<Token>& values) {
  View1<Token> tokens("tokens", values.size());
  auto host = Kokkos::create_mirror_view(tokens);
  for (std::size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(tokens, host);
  return tokens;
}

// 3 sequences of 4; token 1 occurs six times, token 5 never; the position table has a spare row.
const std::vector<Token> repeated = {1, 3, 1, 1, 4, 0, 3, 1, 1, 1, 2, 3};
constexpr int vocab = 6, positions = 5, seq = 4, channels = 3;

TEST(Embedding, ForwardAddsTokenAndPositionRows) {
  ExecSpace space;
  auto emb = make_embedding<double>(vocab, positions, channels);
  test::fill_uniform(emb.token, 1);
  test::fill_uniform(emb.position, 2);
  const auto tokens = make_tokens(repeated);
  View2<double> out("out", repeated.size(), channels);
  forward(space, emb, tokens, seq, out);
  auto hout = Kokkos::create_mirror_view_and_copy(HostSpace(), out);
  auto htoken = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.token);
  auto hposition = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.position);
  for (std::size_t i = 0; i < repeated.size(); ++i)
    for (int c = 0; c < channels; ++c)
      EXPECT_DOUBLE_EQ(hout(i, c), htoken(repeated[i], c) + hposition(i % seq, c)) << i << "," << c;
}

TEST(Embedding, GradientsMatchFiniteDifferencesWithRepeatedTokens) {
  ExecSpace space;
  auto emb = make_embedding<double>(vocab, positions, channels);
  test::fill_uniform(emb.token, 3);
  test::fill_uniform(emb.position, 4);
  const auto tokens = make_tokens(repeated);
  View2<double> out("out", repeated.size(), channels), r("r", repeated.size(), channels);
  test::fill_uniform(r, 5);
  auto loss = [&] {
    forward(space, emb, tokens, seq, out);
    return test::dot(out, r);
  };
  backward_weight(space, emb, tokens, seq, r, allocate_scratch<double>(tokens.extent(0), channels));
  test::expect_gradient("dtoken", emb.token, emb.dtoken, loss, vocab * channels);
  test::expect_gradient("dposition", emb.position, emb.dposition, loss, positions * channels);
  // Unused rows get exactly nothing.
  auto hdtoken = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.dtoken);
  auto hdposition = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.dposition);
  for (int c = 0; c < channels; ++c) {
    EXPECT_EQ(hdtoken(5, c), 0.0);
    EXPECT_EQ(hdposition(4, c), 0.0);
  }
}

TEST(Embedding, BackwardAccumulates) {
  ExecSpace space;
  auto emb = make_embedding<double>(vocab, positions, channels);
  const auto tokens = make_tokens(repeated);
  View2<double> dout("dout", repeated.size(), channels);
  test::fill_uniform(dout, 6);
  backward_weight(space, emb, tokens, seq, dout, allocate_scratch<double>(tokens.extent(0), channels));
  auto token_once = Kokkos::create_mirror(HostSpace(), emb.dtoken);
  auto position_once = Kokkos::create_mirror(HostSpace(), emb.dposition);
  Kokkos::deep_copy(token_once, emb.dtoken);
  Kokkos::deep_copy(position_once, emb.dposition);
  backward_weight(space, emb, tokens, seq, dout, allocate_scratch<double>(tokens.extent(0), channels));
  auto token_twice = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.dtoken);
  auto position_twice = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.dposition);
  for (int c = 0; c < channels; ++c) {
    for (int v = 0; v < vocab; ++v) EXPECT_DOUBLE_EQ(token_twice(v, c), 2 * token_once(v, c));
    for (int t = 0; t < positions; ++t) EXPECT_DOUBLE_EQ(position_twice(t, c), 2 * position_once(t, c));
  }
}

// A token on more rows than a piece: its sum is its pieces' sums in order, the pieces being its rows among the
// rows sorted by (token, row), cut at every multiple of embedding_piece_rows sorted positions. Both paths give the
// bits of that order, computed here by plain loops.
template <KernelPath P> void expect_pieces_in_the_documented_order() {
  ExecSpace space;
  constexpr int seq_len = 50, sequences = 9, width = 5, table = 4;
  const std::int64_t rows = std::int64_t(seq_len) * sequences;
  std::vector<Token> ids(rows);
  for (std::int64_t i = 0; i < rows; ++i) ids[i] = i % 7 == 3 ? Token(i % table) : Token(2);  // token 2: most rows
  auto emb = make_embedding<float>(table, seq_len, width);
  const auto tokens = make_tokens(ids);
  View2<float> dout("dout", rows, width);
  test::fill_uniform(dout, 8);
  backward_weight<float, float, P>(space, emb, tokens, seq_len, dout, allocate_scratch<float>(rows, width));
  auto d = Kokkos::create_mirror_view_and_copy(HostSpace(), dout);
  auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.dtoken);
  std::vector<std::int64_t> sorted(rows);  // the rows by (token, row)
  for (std::int64_t i = 0; i < rows; ++i) sorted[i] = i;
  std::stable_sort(sorted.begin(), sorted.end(), [&](std::int64_t a, std::int64_t b) { return ids[a] < ids[b]; });
  ASSERT_GT(std::count(ids.begin(), ids.end(), Token(2)), 2 * embedding_piece_rows);
  for (int c = 0; c < width; ++c) {
    std::vector<float> sum(table, 0.0f), piece(table, 0.0f);
    for (std::int64_t p = 0; p < rows; ++p) {
      const Token t = ids[sorted[p]];
      const bool starts = p == 0 || p % embedding_piece_rows == 0 || ids[sorted[p - 1]] != t;
      if (starts && p > 0) sum[ids[sorted[p - 1]]] += piece[ids[sorted[p - 1]]];  // the previous piece ends
      if (starts) piece[t] = 0.0f;
      piece[t] += d(sorted[p], c);
    }
    sum[ids[sorted[rows - 1]]] += piece[ids[sorted[rows - 1]]];
    for (int t = 0; t < table; ++t) EXPECT_EQ(got(t, c), sum[t]) << "token " << t << " channel " << c;
  }
}

TEST(Embedding, FrequentTokensSumInPiecesInTheDocumentedOrder) {
  expect_pieces_in_the_documented_order<KernelPath::device>();
  if constexpr (path_available(KernelPath::host)) expect_pieces_in_the_documented_order<KernelPath::host>();
}

TEST(Embedding, RejectsSequenceLengthsThatDoNotFit) {
  ExecSpace space;
  auto emb = make_embedding<float>(vocab, positions, channels);
  const auto tokens = make_tokens(repeated);
  View2<float> out("out", repeated.size(), channels);
  EXPECT_THROW(forward(space, emb, tokens, 0, out), InputError);
  EXPECT_THROW(forward(space, emb, tokens, 6, out), InputError);  // longer than the position table
  EXPECT_THROW(forward(space, emb, tokens, 5, out), InputError);  // 12 rows are not whole sequences of 5
  const auto order = allocate_scratch<float>(tokens.extent(0), channels);
  EXPECT_THROW(backward_weight(space, emb, tokens, 5, out, order), InputError);
  EXPECT_NO_THROW(forward(space, emb, tokens, 3, out));
}

// An id outside [0, vocab) is never read from the table (it used to read out of bounds): its row comes out
// NaN, which the trainer reports as a non-finite loss, its neighbours are untouched, and backward skips it.
TEST(Embedding, OutOfRangeTokenIdsGiveNanRowsAndNoGradient) {
  ExecSpace space;
  auto emb = make_embedding<double>(vocab, positions, channels);
  test::fill_uniform(emb.token, 1);
  test::fill_uniform(emb.position, 2);
  std::vector<Token> ids = repeated;
  ids[2] = vocab;        // one past the end
  ids[7] = -1;           // negative
  ids[9] = 1 << 30;      // far outside
  const auto tokens = make_tokens(ids);
  View2<double> out("out", ids.size(), channels);
  forward(space, emb, tokens, seq, out);
  auto hout = Kokkos::create_mirror_view_and_copy(HostSpace(), out);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (int c = 0; c < channels; ++c) {
      const bool bad = ids[i] < 0 || ids[i] >= vocab;
      EXPECT_EQ(std::isnan(hout(i, c)), bad) << "row " << i << " id " << ids[i];
    }
  View2<double> dout("dout", ids.size(), channels);
  Kokkos::deep_copy(dout, 1.0);
  backward_weight(space, emb, tokens, seq, dout, allocate_scratch<double>(tokens.extent(0), channels));
  auto dtoken = Kokkos::create_mirror_view_and_copy(HostSpace(), emb.dtoken);
  // Token 1 appears six times in `repeated`; rows 2, 7 and 9 (1s there) now hold bad ids.
  for (int c = 0; c < channels; ++c) EXPECT_DOUBLE_EQ(dtoken(1, c), 3.0);
}

}  // namespace
}  // namespace kpipe::nn
