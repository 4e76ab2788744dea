#pragma once
// What a rank's memory holds, by category: every Kokkos allocation kpipe makes happens inside a Scope
// naming its category, so that the allocation meter (memory/meter.hpp) attributes the bytes, and the
// memory plan (memory/plan.hpp) predicts the same categories from the model description and the schedule.
#include <array>
#include <cstdint>

namespace kpipe::memory {

enum class Category : int {
  parameters,       // the weights
  gradients,        // their gradients (accumulated over the micro-batches, reduced across replicas)
  optimizer,        // optimizer moments and the weight-decay mask
  weight_versions,  // older weight versions a schedule keeps (PipeDream's stashes); none for synchronous ones
  activations,      // activation slots: what a micro-batch keeps from its forward until its backward is done
  backward,         // backward buffers: what a micro-batch holds from its backward_input until its backward_weight
  messages,         // spare [N, C] buffers that receives land in and sends in flight keep
  workspaces,       // per-chunk scratch (attention, recomputation), host token staging rows, loss sums
  snapshot,         // host (pinned) copy of what a checkpoint holds, written beside the training (checkpoint.async)
};
constexpr int category_count = 9;
constexpr std::array<Category, category_count> all_categories{
    Category::parameters,  Category::gradients, Category::optimizer, Category::weight_versions,
    Category::activations, Category::backward,  Category::messages,  Category::workspaces,
    Category::snapshot};

const char* to_string(Category category);     // "parameters", "weight_versions", ...
const char* region_name(Category category);   // "kpipe::memory::parameters", ...

using Bytes = std::array<std::int64_t, category_count>;  // bytes per category, indexed by int(Category)
std::int64_t total(const Bytes& bytes);

// While it lives, Kokkos allocations count under `category` (a Kokkos Tools profiling region that the meter
// follows; without a tool or meter attached it costs a branch).
class Scope {
 public:
  explicit Scope(Category category);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

}  // namespace kpipe::memory
