#pragma once
// The work ledger of one micro-batch: every kernel a whole-model chunk (the embedding, every block, the head)
// launches for it on the device path (core/kernel_path.hpp), pass by pass, with what each launch offers a GPU
// and costs it, and the vendor calls beside them (cuBLAS products, the key sort, deep copies). A GPU hides a
// load's latency only behind tens of thousands of threads, each doing a short walk; this is where a kernel that
// gives it a few thousand, or walks thousands of rows, shows without a GPU (tests/model/test_kernel_ledger.cpp
// asserts the bounds at the wide model's shapes, and that the ledger lists exactly the kernels a Chunk launches).
//
// Every figure comes from the geometry the kernels use (core/column_sums.hpp's groups and tiles, nn/attention.hpp's
// blocks of query rows, nn/embedding.hpp's pieces), so a change of geometry changes the ledger with it.
//  - items: the independent work items of a launch: a range's extent; a team policy's league times the threads
//    its inner ranges use (for a team of Kokkos::AUTO size, assumed_team_lanes).
//  - serial: the longest loop one item walks (elements, rows or groups), 1 for one element per item.
//  - flops: the arithmetic of the kernel's expressions (an exponential counts as one); bytes: compulsory traffic,
//    each distinct element read and each element written counted once (what caches cannot save).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/core/kernel_path.hpp"

namespace kpipe::model {

// A micro-batch's passes through a chunk, in the order a plain step runs them.
enum class Pass { forward, loss, backward_input, backward_weight };
inline constexpr std::array<Pass, 4> all_passes = {Pass::forward, Pass::loss, Pass::backward_input,
                                                   Pass::backward_weight};
const char* to_string(Pass pass);

// Who does an entry's work: a Kokkos kernel of kpipe's, a vendor library (cuBLAS products; thrust's sort on CUDA),
// or a device-to-device copy (Kokkos::deep_copy).
enum class WorkKind { kernel, vendor, copy };
const char* to_string(WorkKind kind);

// The arithmetic an entry's FLOPs run at: CUDA cores in fp32, or tensor cores in TF32 or bf16.
enum class Arithmetic { fp32, tf32, bf16 };
const char* to_string(Arithmetic arithmetic);

// One launch (or vendor call, or copy).
struct Launch {
  std::int64_t items = 0;   // independent work items; 0 for vendor calls and copies (their own business)
  std::int64_t serial = 0;  // longest serial loop of one item; 0 for vendor calls and copies
  double flops = 0;
  double bytes = 0;         // read + written
};

// The launches of one label in one pass, over the whole chunk (a block's kernel once per block).
struct LedgerEntry {
  Pass pass = Pass::forward;
  std::string label;  // the Kokkos label of a kernel; a descriptive name for vendor calls and copies
  WorkKind kind = WorkKind::kernel;
  Arithmetic arithmetic = Arithmetic::fp32;
  std::vector<Launch> calls;  // one per launch, in launch order

  int launches() const { return int(calls.size()); }
  std::int64_t fewest_items() const;    // over the launches
  std::int64_t longest_serial() const;  // over the launches
  double flops() const;                 // all launches
  double bytes() const;                 // all launches
};

struct KernelLedger {
  ModelConfig model;
  int sequences = 0;  // per micro-batch
  Precision precision = Precision::fp32;
  std::vector<LedgerEntry> entries;  // pass by pass, each pass's labels in the order of their first launch
  // The entry of (pass, label), or nullptr.
  const LedgerEntry* find(Pass pass, std::string_view label) const;
};

// Threads a team gets on a GPU where a kernel asks Kokkos::AUTO (core/kernel_path.hpp's for_each_team: the
// row-per-team kernels, LayerNorm, the softmaxes, cross entropy). Kokkos picks it per kernel from the
// occupancy; 128 is what it picks for kernels of this size on Hopper, and what the ledger assumes.
inline constexpr int assumed_team_lanes = 128;

// The ledger of one micro-batch of `sequences` sequences through the whole model of `config` at `precision`.
// `path` is the kernel path of the build whose launches it lists: the device path (a GPU's) by default. The one
// difference a host-path build makes is which kernels the fp32 MLP launches (nn/block.cpp's mlp_activation); the
// figures are the device path's geometry either way.
KernelLedger kernel_ledger(const ModelConfig& config, int sequences, Precision precision,
                           KernelPath path = KernelPath::device);

}  // namespace kpipe::model
