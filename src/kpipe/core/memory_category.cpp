#include "kpipe/core/memory_category.hpp"

#include <Kokkos_Core.hpp>

namespace kpipe::memory {

const char* to_string(Category category) {
  switch (category) {
    case Category::parameters: return "parameters";
    case Category::gradients: return "gradients";
    case Category::optimizer: return "optimizer";
    case Category::weight_versions: return "weight_versions";
    case Category::activations: return "activations";
    case Category::backward: return "backward";
    case Category::messages: return "messages";
    case Category::workspaces: return "workspaces";
    case Category::snapshot: return "snapshot";
  }
  return "?";
}

const char* region_name(Category category) {
  switch (category) {
    case Category::parameters: return "kpipe::memory::parameters";
    case Category::gradients: return "kpipe::memory::gradients";
    case Category::optimizer: return "kpipe::memory::optimizer";
    case Category::weight_versions: return "kpipe::memory::weight_versions";
    case Category::activations: return "kpipe::memory::activations";
    case Category::backward: return "kpipe::memory::backward";
    case Category::messages: return "kpipe::memory::messages";
    case Category::workspaces: return "kpipe::memory::workspaces";
    case Category::snapshot: return "kpipe::memory::snapshot";
  }
  return "kpipe::memory::?";
}

std::int64_t total(const Bytes& bytes) {
  std::int64_t sum = 0;
  for (auto b : bytes) sum += b;
  return sum;
}

Scope::Scope(Category category) { Kokkos::Profiling::pushRegion(region_name(category)); }
Scope::~Scope() { Kokkos::Profiling::popRegion(); }

}  // namespace kpipe::memory
