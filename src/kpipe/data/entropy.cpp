#include "kpipe/data/entropy.hpp"

#include <algorithm>
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

double entropy_of_counts_nats(const std::vector<std::int64_t>& counts) {
  std::int64_t total = 0;
  for (const std::int64_t c : counts) total += c;
  return total > 0 ? entropy_of_counts(counts, total) : 0.0;
}

double unigram_entropy_nats(const std::vector<Token>& tokens) {
  if (tokens.empty()) return 0;
  const Token largest = *std::max_element(tokens.begin(), tokens.end());
  std::vector<std::int64_t> counts(std::size_t(std::max<Token>(largest, 0)) + 1, 0);
  for (const Token t : tokens) ++counts[static_cast<std::size_t>(std::max<Token>(t, 0))];
  return entropy_of_counts(counts, std::int64_t(tokens.size()));
}

double bigram_conditional_entropy_nats(const std::vector<Token>& tokens) {
  if (tokens.size() < 2) return 0;
  // H(next | current) = H(current, next) - H(current), both over the same pairs. Pairs are counted by
  // sorting their keys, so a large vocabulary needs no vocab x vocab table.
  std::vector<std::uint64_t> pairs(tokens.size() - 1), firsts(tokens.size() - 1);
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    firsts[i] = static_cast<std::uint32_t>(tokens[i]);
    pairs[i] = firsts[i] << 32 | static_cast<std::uint32_t>(tokens[i + 1]);
  }
  const auto counts_of = [](std::vector<std::uint64_t>& keys) {
    std::sort(keys.begin(), keys.end());
    std::vector<std::int64_t> counts;
    for (std::size_t i = 0; i < keys.size();) {
      std::size_t j = i;
      while (j < keys.size() && keys[j] == keys[i]) ++j;
      counts.push_back(std::int64_t(j - i));
      i = j;
    }
    return counts;
  };
  const auto n = std::int64_t(tokens.size() - 1);
  return entropy_of_counts(counts_of(pairs), n) - entropy_of_counts(counts_of(firsts), n);
}

}  // namespace kpipe::data
