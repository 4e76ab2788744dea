#include "kpipe/runtime/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "kpipe/core/error.hpp"
#include "kpipe/core/rng.hpp"

namespace kpipe::runtime {

void validate(const SamplingOptions& options) {
  require(options.temperature >= 0 && std::isfinite(options.temperature),
          "--temperature = {}: expected a number >= 0 (0: greedy)", options.temperature);
  require(options.top_k >= 0, "--top-k = {}: expected an integer >= 0 (0: no limit)", options.top_k);
}

Token sample_token(const std::vector<double>& logits, const std::vector<bool>& allowed, const SamplingOptions& options,
                   std::int64_t position) {
  if (logits.empty() || allowed.size() != logits.size())
    throw std::invalid_argument("kpipe::runtime::sample_token: logits and allowed must have the same, non-zero size");
  // Candidates: the allowed ids with a finite logit, most likely first (ties: lower id first).
  std::vector<Token> ids;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (allowed[i] && std::isfinite(logits[i])) ids.push_back(Token(i));
  if (ids.empty())
    throw std::invalid_argument("kpipe::runtime::sample_token: no allowed id has a finite logit");
  const auto more_likely = [&](Token a, Token b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const std::size_t keep = options.top_k > 0 ? std::min<std::size_t>(ids.size(), std::size_t(options.top_k)) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(keep), ids.end(), more_likely);
  ids.resize(keep);
  if (options.temperature == 0 || keep == 1) return ids.front();

  const double top = logits[ids.front()];
  std::vector<double> weights(keep);
  for (std::size_t k = 0; k < keep; ++k) weights[k] = std::exp((logits[ids[k]] - top) / options.temperature);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const double u = rng::to_unit(static_cast<std::uint32_t>(
      rng::bits64(rng::make_key(options.seed, static_cast<std::uint64_t>(position), 0, "generate"), 0)));
  double cumulative = 0;
  for (std::size_t k = 0; k < keep; ++k) {
    cumulative += weights[k];
    if (cumulative >= u * total) return ids[k];
  }
  return ids[keep - 1];  // rounding: u * total a hair above the sum
}

}  // namespace kpipe::runtime
