#include "kpipe/runtime/token_staging.hpp"

#include "kpipe/core/fence.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::runtime {

TokenStaging::TokenStaging(int rows, std::int64_t tokens_per_row) {
  memory::Scope scope(memory::Category::workspaces);
  inputs_ = decltype(inputs_)(uninitialized("kpipe::runtime::TokenStaging::inputs"), rows, tokens_per_row);
  targets_ = decltype(targets_)(uninitialized("kpipe::runtime::TokenStaging::targets"), rows, tokens_per_row);
}

std::vector<double> TokenSource::read_losses(const ExecSpace& space) const {
  std::vector<double> host(losses_.extent(0));
  Kokkos::deep_copy(space,
                    Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(host.data(), host.size()),
                    losses_);
  named_fence(space, "kpipe::runtime::TokenSource::read_losses: the host reads the losses");
  return host;
}

template <class T, class A>
void TokenStaging::load(const ExecSpace& space, model::Chunk<T, A>& chunk, int slot, int row) const {
  if (chunk.first()) Kokkos::deep_copy(space, chunk.tokens(slot), Kokkos::subview(inputs_, row, Kokkos::ALL));
  if (chunk.last()) Kokkos::deep_copy(space, chunk.targets(slot), Kokkos::subview(targets_, row, Kokkos::ALL));
}

#define KPIPE_INSTANTIATE(T, A) template void TokenStaging::load(const ExecSpace&, model::Chunk<T, A>&, int, int) const;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::runtime
