#include "kpipe/data/entropy.hpp"

#include <cmath>
#include <cstdint>

#include "kpipe/data/corpus.hpp"

namespace kpipe::data {
namespace {

// Entropy of the empirical distribution of the given counts (summing to total).
double entropy_of_counts(const std::vector<std::int64_t>& counts, std::int64_t total) {
  double h = 0;
  for (const std::int64_t c : counts)
    if (c > 0) {
      const double p = double(c) / double(total);
      h -= p * std::log(p);
    }
  return h;
}

}  // namespace

double unigram_entropy_nats(const std::vector<Token>& tokens) {
  if (tokens.empty()) return 0;
  std::vector<std::int64_t> counts(byte_vocab, 0);
  for (const Token t : tokens) ++counts[static_cast<std::size_t>(t) % byte_vocab];
  return entropy_of_counts(counts, std::int64_t(tokens.size()));
}

double bigram_conditional_entropy_nats(const std::vector<Token>& tokens) {
  if (tokens.size() < 2) return 0;
  // H(next | current) = H(current, next) - H(current), both over the same pairs.
  std::vector<std::int64_t> pairs(byte_vocab * byte_vocab, 0), firsts(byte_vocab, 0);
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::size_t a = static_cast<std::size_t>(tokens[i]) % byte_vocab;
    const std::size_t b = static_cast<std::size_t>(tokens[i + 1]) % byte_vocab;
    ++pairs[a * byte_vocab + b];
    ++firsts[a];
  }
  const auto n = std::int64_t(tokens.size() - 1);
  return entropy_of_counts(pairs, n) - entropy_of_counts(firsts, n);
}

}  // namespace kpipe::data
