#include "kpipe/model/kernel_ledger.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kpipe/core/blas.hpp"
#include "kpipe/core/column_sums.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/nn/attention.hpp"
#include "kpipe/nn/embedding.hpp"

namespace kpipe::model {

const char* to_string(Pass pass) {
  switch (pass) {
    case Pass::forward: return "forward";
    case Pass::loss: return "loss";
    case Pass::backward_input: return "backward_input";
    case Pass::backward_weight: return "backward_weight";
  }
  return "?";
}

const char* to_string(WorkKind kind) {
  switch (kind) {
    case WorkKind::kernel: return "kernel";
    case WorkKind::vendor: return "vendor";
    case WorkKind::copy: return "copy";
  }
  return "?";
}

const char* to_string(Arithmetic arithmetic) {
  switch (arithmetic) {
    case Arithmetic::fp32: return "fp32";
    case Arithmetic::tf32: return "tf32";
    case Arithmetic::bf16: return "bf16";
  }
  return "?";
}

std::int64_t LedgerEntry::fewest_items() const {
  std::int64_t fewest = calls.empty() ? 0 : calls.front().items;
  for (const Launch& l : calls) fewest = std::min(fewest, l.items);
  return fewest;
}

std::int64_t LedgerEntry::longest_serial() const {
  std::int64_t longest = 0;
  for (const Launch& l : calls) longest = std::max(longest, l.serial);
  return longest;
}

double LedgerEntry::flops() const {
  double sum = 0;
  for (const Launch& l : calls) sum += l.flops;
  return sum;
}

double LedgerEntry::bytes() const {
  double sum = 0;
  for (const Launch& l : calls) sum += l.bytes;
  return sum;
}

const LedgerEntry* KernelLedger::find(Pass pass, std::string_view label) const {
  for (const LedgerEntry& e : entries)
    if (e.pass == pass && e.label == label) return &e;
  return nullptr;
}

namespace {

constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The shapes of one micro-batch, as the layers see them.
struct Shapes {
  std::int64_t sequences, seq, rows, c, heads, hd, f, vocab;
  double a, t;  // bytes of a stored element (A) and of an accumulated one (T)
  bool mixed;   // A is bf16, T float
  Arithmetic linear, attention;  // the Linear layers' products (tf32 where asked), attention's (never tf32)
  KernelPath path;
  nn::AttentionShape attention_shape() const { return {int(sequences), int(seq), int(heads), int(hd)}; }
};

// A range policy of n items, one element each.
Launch range_launch(std::int64_t n, double flops, double bytes) { return {n, 1, flops, bytes}; }

// A team per row of `extent` elements, of Kokkos::AUTO size on a GPU (for_each_team): the threads split the row.
Launch row_team_launch(std::int64_t league, std::int64_t extent, double flops, double bytes) {
  const std::int64_t used = std::min<std::int64_t>(assumed_team_lanes, std::max<std::int64_t>(extent, 1));
  return {league * used, ceil_div(extent, used), flops, bytes};
}

// core/column_sums.hpp's device path over rows x cols: a team per tile of columns, its threads the row groups
// (several each past column_sum_threads), its lanes the tile's columns; then one lane per column sums the groups.
Launch column_sums_launch(std::int64_t rows, std::int64_t cols, double flops, double bytes) {
  const ColumnGroups grouping = column_groups(rows);
  const std::int64_t threads = column_sum_threads(grouping.groups);
  const std::int64_t used = std::min<std::int64_t>(grouping.groups, threads);
  const std::int64_t walk = ceil_div(grouping.groups, threads) * grouping.group_rows;
  return {ceil_div(cols, column_tile) * used * column_tile, std::max(walk, grouping.groups), flops, bytes};
}

// Collects launches into entries, one per (pass, label).
class Builder {
 public:
  void kernel(Pass pass, const char* label, const Launch& launch) {
    add(pass, label, WorkKind::kernel, Arithmetic::fp32, launch);
  }
  void copy(Pass pass, const char* label, double bytes) {
    add(pass, label, WorkKind::copy, Arithmetic::fp32, {0, 0, 0, bytes});
  }
  void vendor(Pass pass, const std::string& label, Arithmetic arithmetic, double flops, double bytes) {
    add(pass, label, WorkKind::vendor, arithmetic, {0, 0, flops, bytes});
  }
  // `count` products of op(A) m x k by op(B) k x n into m x n (a strided batch when count > 1), operands of
  // in_bytes, the output of out_bytes, read too where beta is 1.
  void product(Pass pass, const std::string& label, Arithmetic arithmetic, std::int64_t m, std::int64_t n,
               std::int64_t k, double in_bytes, double out_bytes, bool reads_c, std::int64_t count = 1) {
    const double flops = double(count) * blas::gemm_flops(m, n, k);
    const double bytes =
        double(count) * (double(m * k + k * n) * in_bytes + double(m * n) * out_bytes * (reads_c ? 2 : 1));
    vendor(pass, label, arithmetic, flops, bytes);
  }

  std::vector<LedgerEntry> entries;

 private:
  void add(Pass pass, const std::string& label, WorkKind kind, Arithmetic arithmetic, const Launch& launch) {
    for (LedgerEntry& e : entries)
      if (e.pass == pass && e.label == label) {
        e.calls.push_back(launch);
        return;
      }
    entries.push_back({pass, label, kind, arithmetic, {launch}});
  }
};

std::string gemm_label(const char* layer, Pass pass) {
  return fmt::format("blas::gemm::{}::{}", layer, to_string(pass));
}
std::string attention_label(Pass pass, const char* product) {
  return fmt::format("blas::gemm_strided_batched::attention::{}::{}", to_string(pass), product);
}

// ---- The layers, as nn/*.cpp launch them on the device path ----

void layernorm_forward(Builder& b, const Shapes& s) {
  const double elements = double(s.rows * s.c);
  b.kernel(Pass::forward, "kpipe::nn::LayerNorm::forward",
           row_team_launch(s.rows, s.c, 9 * elements, 2 * elements * s.a + 2 * s.c * s.t + 2 * s.rows * s.t));
}

// residual: dx = residual + the LayerNorm's gradient (one more read of [rows, c]).
void layernorm_backward_input(Builder& b, const Shapes& s, bool residual) {
  const double elements = double(s.rows * s.c);
  b.kernel(Pass::backward_input, "kpipe::nn::LayerNorm::backward_input",
           row_team_launch(s.rows, s.c, 14 * elements,
                           (residual ? 4 : 3) * elements * s.a + s.c * s.t + 2 * s.rows * s.t));
}

void layernorm_backward_weight(Builder& b, const Shapes& s) {
  const double elements = double(s.rows * s.c);
  b.kernel(Pass::backward_weight, "kpipe::nn::LayerNorm::backward_weight",
           column_sums_launch(s.rows, s.c, 5 * elements, 2 * elements * s.a + 2 * s.rows * s.t + 4 * s.c * s.t));
}

// nn/linear.cpp's linear_into: y = x W^T + b (+ residual). In T: the bias (and residual) written first, the
// product added onto them (beta 1); mixed: the product into the T accumulator, then one epilogue.
void linear_forward(Builder& b, const Shapes& s, const char* layer, std::int64_t in, std::int64_t out, bool residual) {
  const double elements = double(s.rows * out);
  if (s.mixed) {
    b.product(Pass::forward, gemm_label(layer, Pass::forward), s.linear, s.rows, out, in, s.a, s.t, false);
    b.kernel(Pass::forward, "kpipe::nn::Linear::forward::epilogue",
             range_launch(s.rows * out, (residual ? 2 : 1) * elements,
                          elements * s.t + out * s.t + (residual ? elements * s.a : 0) + elements * s.a));
  } else {
    b.kernel(Pass::forward, "kpipe::nn::Linear::forward::bias",
             range_launch(s.rows * out, residual ? elements : 0,
                          out * s.t + (residual ? elements * s.a : 0) + elements * s.a));
    b.product(Pass::forward, gemm_label(layer, Pass::forward), s.linear, s.rows, out, in, s.a, s.a, true);
  }
}

void linear_backward_input(Builder& b, const Shapes& s, const char* layer, std::int64_t in, std::int64_t out) {
  b.product(Pass::backward_input, gemm_label(layer, Pass::backward_input), s.linear, s.rows, in, out, s.a, s.a, false);
}

void linear_backward_weight(Builder& b, const Shapes& s, const char* layer, std::int64_t in, std::int64_t out,
                            bool bias) {
  b.product(Pass::backward_weight, gemm_label(layer, Pass::backward_weight), s.linear, out, in, s.rows, s.a, s.t,
            true);
  if (bias) {
    const double elements = double(s.rows * out);
    b.kernel(Pass::backward_weight, "kpipe::nn::Linear::backward_weight::bias",
             column_sums_launch(s.rows, out, elements, elements * s.a + 2 * out * s.t));
  }
}

// nn/block.cpp's mlp_activation: f = fc(h2), g = GeLU(f).
void mlp_activation(Builder& b, const Shapes& s) {
  const double elements = double(s.rows * s.f);
  if (s.mixed) {
    b.product(Pass::forward, gemm_label("fc", Pass::forward), s.linear, s.rows, s.f, s.c, s.a, s.t, false);
    b.kernel(Pass::forward, "kpipe::nn::bias_gelu_forward",
             range_launch(s.rows * s.f, 10 * elements, elements * s.t + s.f * s.t + 2 * elements * s.a));
  } else if (s.path == KernelPath::host) {
    linear_forward(b, s, "fc", s.c, s.f, false);
    b.kernel(Pass::forward, "kpipe::nn::gelu_forward", range_launch(s.rows * s.f, 9 * elements, 2 * elements * s.a));
  } else {
    b.product(Pass::forward, gemm_label("fc", Pass::forward), s.linear, s.rows, s.f, s.c, s.a, s.t, false);
    b.kernel(Pass::forward, "kpipe::nn::bias_gelu_forward",
             range_launch(s.rows * s.f, 10 * elements, elements * s.t + s.f * s.t + 2 * elements * s.t));
  }
}

// Query rows r0..r1-1 of nn/attention.cpp's blocks, every head of the micro-batch at once.
struct QueryBlock {
  std::int64_t r0, r1;
  std::int64_t rows() const { return r1 - r0; }
  // Live (causal) entries of one head's block: query i sees keys 0..i.
  double live() const { return double(r1 * (r1 + 1) - r0 * (r0 + 1)) / 2; }
};

std::vector<QueryBlock> query_blocks(const Shapes& s) {
  const std::int64_t rows = nn::block_rows(s.attention_shape());
  std::vector<QueryBlock> blocks;
  for (std::int64_t r0 = 0; r0 < s.seq; r0 += rows) blocks.push_back({r0, std::min(s.seq, r0 + rows)});
  return blocks;
}

// The packed activations to head-major copies: one element per item; `parts` of q, k, v (and dout).
void gather_heads(Builder& b, const Shapes& s, Pass pass, int parts) {
  const double elements = double(s.rows * parts * s.c);
  b.kernel(pass, "kpipe::nn::Attention::gather_heads", range_launch(s.rows * parts * s.c, 0, 2 * elements * s.a));
}

void attention_forward(Builder& b, const Shapes& s) {
  const Pass pass = Pass::forward;
  const std::int64_t bh = s.sequences * s.heads;
  gather_heads(b, s, pass, 3);
  for (const QueryBlock& q : query_blocks(s)) {
    const std::int64_t rows = q.rows(), keys = q.r1;
    b.product(pass, attention_label(pass, "scores"), s.attention, rows, keys, s.hd, s.a, s.t, false, bh);
    const double full = double(bh * rows * keys), live = double(bh) * q.live();
    b.kernel(pass, "kpipe::nn::Attention::forward::softmax",
             row_team_launch(bh * rows, keys, 5 * live, live * s.t + full * s.a + 2.0 * bh * rows * s.t));
    b.product(pass, attention_label(pass, "probs_v"), s.attention, rows, s.hd, keys, s.a, s.a, false, bh);
  }
  b.kernel(pass, "kpipe::nn::Attention::forward::scatter_heads",
           range_launch(s.rows * s.c, 0, 2.0 * s.rows * s.c * s.a));
}

// The blocks last first (the last writes dk and dv whole, the others add to them).
void attention_backward_input(Builder& b, const Shapes& s) {
  const Pass pass = Pass::backward_input;
  const std::int64_t bh = s.sequences * s.heads;
  gather_heads(b, s, pass, 4);
  std::vector<QueryBlock> blocks = query_blocks(s);
  std::reverse(blocks.begin(), blocks.end());
  for (const QueryBlock& q : blocks) {
    const std::int64_t rows = q.rows(), keys = q.r1;
    const bool adds = q.r1 != s.seq;  // beta 1 for all but the last block
    b.product(pass, attention_label(pass, "scores"), s.attention, rows, keys, s.hd, s.a, s.t, false, bh);
    b.product(pass, attention_label(pass, "dprobs"), s.attention, rows, keys, s.hd, s.a, s.t, false, bh);
    const double full = double(bh * rows * keys), live = double(bh) * q.live();
    b.kernel(pass, "kpipe::nn::Attention::backward_input::softmax",
             row_team_launch(bh * rows, keys, 8 * live, 2 * live * s.t + 2 * full * s.a + 2.0 * bh * rows * s.t));
    b.product(pass, attention_label(pass, "dq"), s.attention, rows, s.hd, keys, s.a, s.a, false, bh);
    b.product(pass, attention_label(pass, "dk"), s.attention, keys, s.hd, rows, s.a, s.t, adds, bh);
    b.product(pass, attention_label(pass, "dv"), s.attention, keys, s.hd, rows, s.a, s.t, adds, bh);
  }
  const double elements = double(s.rows * s.c);
  b.kernel(pass, "kpipe::nn::Attention::backward_input::scatter_heads",
           range_launch(3 * s.rows * s.c, 0, elements * (s.a + 2 * s.t) + 3 * elements * s.a));
}

// Mixed: proj's product in T, then its bias, the residual and ln2 in one team per row (the row it writes is
// read again from cache, not memory).
void add_residual_layernorm_forward(Builder& b, const Shapes& s) {
  const double elements = double(s.rows * s.c);
  b.product(Pass::forward, gemm_label("proj", Pass::forward), s.linear, s.rows, s.c, s.c, s.a, s.t, false);
  b.kernel(Pass::forward, "kpipe::nn::LayerNorm::add_residual_forward",
           row_team_launch(s.rows, s.c, 11 * elements,
                           elements * (s.t + 3 * s.a) + 3 * s.c * s.t + 2 * s.rows * s.t));
}

void block_forward(Builder& b, const Shapes& s) {
  layernorm_forward(b, s);
  linear_forward(b, s, "qkv", s.c, 3 * s.c, false);
  attention_forward(b, s);
  if (s.mixed) {
    add_residual_layernorm_forward(b, s);
  } else {
    linear_forward(b, s, "proj", s.c, s.c, true);
    layernorm_forward(b, s);
  }
  mlp_activation(b, s);
  linear_forward(b, s, "fc_proj", s.f, s.c, true);
}

void block_backward_input(Builder& b, const Shapes& s) {
  const double elements = double(s.rows * s.f);
  linear_backward_input(b, s, "fc_proj", s.f, s.c);
  b.kernel(Pass::backward_input, "kpipe::nn::gelu_backward_input",
           range_launch(s.rows * s.f, 18 * elements, 3 * elements * s.a));
  linear_backward_input(b, s, "fc", s.c, s.f);
  layernorm_backward_input(b, s, true);
  linear_backward_input(b, s, "proj", s.c, s.c);
  attention_backward_input(b, s);
  linear_backward_input(b, s, "qkv", s.c, 3 * s.c);
  layernorm_backward_input(b, s, true);
}

void block_backward_weight(Builder& b, const Shapes& s) {
  linear_backward_weight(b, s, "fc_proj", s.f, s.c, true);
  linear_backward_weight(b, s, "fc", s.c, s.f, true);
  layernorm_backward_weight(b, s);
  linear_backward_weight(b, s, "proj", s.c, s.c, true);
  linear_backward_weight(b, s, "qkv", s.c, 3 * s.c, true);
  layernorm_backward_weight(b, s);
}

void embedding_forward(Builder& b, const Shapes& s) {
  const double elements = double(s.rows * s.c);
  const double token_rows = double(std::min(s.rows, s.vocab));  // distinct table rows read, at most
  b.kernel(Pass::forward, "kpipe::nn::Embedding::forward",
           range_launch(s.rows * s.c, elements,
                        4.0 * s.rows + (token_rows + double(s.seq)) * s.c * s.t + elements * s.a));
}

// nn/embedding.cpp's backward_weight: the rows sorted by (token, row), summed in pieces of at most
// embedding_piece_rows, the pieces added per token; the positions summed over the sequences. The ranges run one
// item per (sorted row, channel); which of them find work depends on the tokens (a piece's first row does).
void embedding_backward_weight(Builder& b, const Shapes& s) {
  const Pass pass = Pass::backward_weight;
  const std::int64_t piece = nn::embedding_piece_rows;
  const double elements = double(s.rows * s.c), key = sizeof(std::int64_t);
  const double tokens = double(std::min(s.rows, s.vocab));                      // distinct tokens, at most
  const double pieces = std::min(double(s.rows), tokens + double(ceil_div(s.rows, piece)));  // at most
  b.kernel(pass, "kpipe::nn::Embedding::backward_weight::keys", range_launch(s.rows, 0, s.rows * (4 + key)));
  // Thrust's radix sort on CUDA: 8 passes of 8 bits over the 64-bit keys, each reading and writing them.
  b.vendor(pass, "Kokkos::sort::Embedding::keys", Arithmetic::fp32, 0, 8 * 2 * s.rows * key);
  b.kernel(pass, "kpipe::nn::Embedding::backward_weight::pieces",
           {s.rows * s.c, std::min(piece, s.rows), elements, s.rows * key + elements * s.a + pieces * s.c * s.t});
  b.kernel(pass, "kpipe::nn::Embedding::backward_weight::token",
           {s.rows * s.c, ceil_div(s.rows, piece), pieces * s.c,
            s.rows * key + pieces * s.c * s.t + 2 * tokens * s.c * s.t});
  b.kernel(pass, "kpipe::nn::Embedding::backward_weight::position",
           {s.seq * s.c, s.sequences, elements, elements * s.a + 2.0 * s.seq * s.c * s.t});
}

void head_forward(Builder& b, const Shapes& s) {
  layernorm_forward(b, s);
  b.product(Pass::forward, gemm_label("lm", Pass::forward), s.linear, s.rows, s.vocab, s.c, s.a, s.t, false);
  const double elements = double(s.rows * s.vocab);
  b.kernel(Pass::forward, "kpipe::nn::CrossEntropy::forward",
           row_team_launch(s.rows, s.vocab, 4 * elements, elements * s.t + s.rows * (4 + s.t)));
}

void head_loss(Builder& b, const Shapes& s) {
  b.kernel(Pass::loss, "kpipe::nn::Head::loss_sum", range_launch(s.rows, double(s.rows), s.rows * s.t + 8));
}

void head_backward_input(Builder& b, const Shapes& s) {
  const double elements = double(s.rows * s.vocab);
  // dL/dlogits over the logits in T, or into a buffer of its own in A (mixed).
  b.kernel(Pass::backward_input, "kpipe::nn::CrossEntropy::backward_input",
           row_team_launch(s.rows, s.vocab, 6 * elements, elements * s.t + elements * s.a + 4.0 * s.rows));
  linear_backward_input(b, s, "lm", s.c, s.vocab);
  layernorm_backward_input(b, s, false);
}

void head_backward_weight(Builder& b, const Shapes& s) {
  linear_backward_weight(b, s, "lm", s.c, s.vocab, false);
  layernorm_backward_weight(b, s);
}

}  // namespace

KernelLedger kernel_ledger(const ModelConfig& config, int sequences, Precision precision, KernelPath path) {
  require(sequences > 0, "kernel ledger: sequences per micro-batch = {}: must be positive", sequences);
  require(config.n_heads > 0 && config.d_model % config.n_heads == 0,
          "kernel ledger: model.n_heads = {} must divide model.d_model = {}", config.n_heads, config.d_model);
  const bool mixed = precision == Precision::bf16;
  Shapes s{};
  s.sequences = sequences;
  s.seq = config.seq_len;
  s.rows = std::int64_t(sequences) * config.seq_len;
  s.c = config.d_model;
  s.heads = config.n_heads;
  s.hd = config.d_model / config.n_heads;
  s.f = std::int64_t(config.mlp_ratio) * config.d_model;
  s.vocab = config.vocab;
  s.a = mixed ? 2 : 4;
  s.t = 4;
  s.mixed = mixed;
  s.linear = mixed ? Arithmetic::bf16 : precision == Precision::tf32 ? Arithmetic::tf32 : Arithmetic::fp32;
  s.attention = mixed ? Arithmetic::bf16 : Arithmetic::fp32;
  s.path = path;

  Builder b;
  embedding_forward(b, s);
  for (int l = 0; l < config.n_layers; ++l) block_forward(b, s);
  head_forward(b, s);
  head_loss(b, s);
  head_backward_input(b, s);
  for (int l = 0; l < config.n_layers; ++l) block_backward_input(b, s);
  head_backward_weight(b, s);
  for (int l = 0; l < config.n_layers; ++l) block_backward_weight(b, s);
  embedding_backward_weight(b, s);

  KernelLedger ledger;
  ledger.model = config;
  ledger.sequences = sequences;
  ledger.precision = precision;
  ledger.entries = std::move(b.entries);
  return ledger;
}

}  // namespace kpipe::model
