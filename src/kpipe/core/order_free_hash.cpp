#include "kpipe/core/order_free_hash.hpp"

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/elementwise.hpp"

namespace kpipe {

template <class E>
std::uint64_t order_free_hash(const ExecSpace& space, const E* data, std::int64_t n, std::uint64_t first_key,
                              std::uint64_t key_step) {
  std::uint64_t sum = 0;
  if (n <= 0) return sum;
  // Host kernels: blocks of contiguous elements, a loop the compiler vectorizes (integer sums may be
  // reassociated); devices: one element per thread. The sum is the same either way.
  const std::int64_t block = elementwise_block<>;
  Kokkos::parallel_reduce(
      "kpipe::order_free_hash", range(space, (n + block - 1) / block),
      KOKKOS_LAMBDA(std::int64_t b, std::uint64_t & s) {
        const std::int64_t begin = b * block, end = begin + block < n ? begin + block : n;
        std::uint64_t part = 0;
        for (std::int64_t i = begin; i < end; ++i)
          part += mix_element(first_key + std::uint64_t(i) * key_step, element_bits(data[i]));
        s += part;
      },
      sum);
  return sum;
}

#define KPIPE_INSTANTIATE(E) \
  template std::uint64_t order_free_hash(const ExecSpace&, const E*, std::int64_t, std::uint64_t, std::uint64_t);
KPIPE_INSTANTIATE(float)
KPIPE_INSTANTIATE(double)
KPIPE_INSTANTIATE(bf16)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe
