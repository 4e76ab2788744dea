#include "kpipe/planner/roofline_profile.hpp"

#include <array>
#include <string>

namespace kpipe::planner {

namespace {

// Seconds per pass of a ledger's entries: forward (the loss included), backward_input, backward_weight.
template <class Belongs>
std::array<double, 3> pass_seconds(const model::KernelLedger& ledger, const model::GpuSpec& gpu,
                                   const Belongs& belongs) {
  std::array<double, 3> s{};
  for (const auto& e : ledger.entries) {
    if (!belongs(e)) continue;
    const int k = e.pass == model::Pass::backward_input ? 1 : e.pass == model::Pass::backward_weight ? 2 : 0;
    s[std::size_t(k)] += model::entry_bound(e, gpu);
  }
  return s;
}

}  // namespace

Profile roofline_profile(const ModelConfig& model, int sequences, Precision precision, const model::GpuSpec& gpu) {
  ModelConfig one = model, two = model;
  one.n_layers = 1;
  two.n_layers = 2;
  const model::KernelLedger l1 = model::kernel_ledger(one, sequences, precision);
  const model::KernelLedger l2 = model::kernel_ledger(two, sequences, precision);
  const auto all = [](const model::LedgerEntry&) { return true; };
  const auto embedding = [](const model::LedgerEntry& e) { return e.label.find("Embedding") != std::string::npos; };
  const std::array<double, 3> s1 = pass_seconds(l1, gpu, all), s2 = pass_seconds(l2, gpu, all);
  const std::array<double, 3> emb = pass_seconds(l1, gpu, embedding);
  Profile p;
  p.model = model;
  p.sequences = sequences;
  for (std::size_t k = 0; k < 3; ++k) {
    const double block = s2[k] - s1[k];
    p.block[k] = block / sequences;
    p.embedding[k] = emb[k] / sequences;
    p.head[k] = (s1[k] - block - emb[k]) / sequences;
  }
  // Recomputation: left to the cost model's share of the block's forward (p.recompute none, its time 0).
  const double bytes_per_parameter = 8.0 * sizeof(float) + (precision == Precision::bf16 ? 6.0 : 0.0);
  p.optimizer = bytes_per_parameter / gpu.bandwidth;
  return p;
}

}  // namespace kpipe::planner
