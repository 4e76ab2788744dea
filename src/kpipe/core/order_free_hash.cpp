#include "kpipe/core/order_free_hash.hpp"

#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/elementwise.hpp"

namespace kpipe {

namespace {

// The hash, copying the elements where `copying` (a template argument: the loop stays branch-free).
template <bool copying, class E>
std::uint64_t hash_elements(const char* label, const ExecSpace& space, const E* data, E* copy, std::int64_t n,
                            std::uint64_t first_key, std::uint64_t key_step) {
  std::uint64_t sum = 0;
  if (n <= 0) return sum;
  // Host kernels: blocks of contiguous elements, a loop the compiler vectorizes (integer sums may be
  // reassociated); devices: one element per thread. The sum is the same either way.
  const std::int64_t block = elementwise_block<>;
  Kokkos::parallel_reduce(
      label, range(space, (n + block - 1) / block),
      KOKKOS_LAMBDA(std::int64_t b, std::uint64_t & s) {
        const std::int64_t begin = b * block, end = begin + block < n ? begin + block : n;
        [[maybe_unused]] E* const to = copy;  // captured outside the if constexpr (nvcc's extended lambdas)
        std::uint64_t part = 0;
        for (std::int64_t i = begin; i < end; ++i) {
          const E value = data[i];
          if constexpr (copying) to[i] = value;
          part += mix_element(first_key + std::uint64_t(i) * key_step, element_bits(value));
        }
        s += part;
      },
      sum);
  return sum;
}

}  // namespace

template <class E>
std::uint64_t order_free_hash(const ExecSpace& space, const E* data, std::int64_t n, std::uint64_t first_key,
                              std::uint64_t key_step) {
  return hash_elements<false>("kpipe::order_free_hash", space, data, static_cast<E*>(nullptr), n, first_key,
                              key_step);
}

template <class E>
std::uint64_t order_free_hash_copy(const ExecSpace& space, const E* data, E* copy, std::int64_t n,
                                   std::uint64_t first_key, std::uint64_t key_step) {
  return hash_elements<true>("kpipe::order_free_hash_copy", space, data, copy, n, first_key, key_step);
}

#define KPIPE_INSTANTIATE(E)                                                                                         \
  template std::uint64_t order_free_hash(const ExecSpace&, const E*, std::int64_t, std::uint64_t, std::uint64_t); \
  template std::uint64_t order_free_hash_copy(const ExecSpace&, const E*, E*, std::int64_t, std::uint64_t,        \
                                              std::uint64_t);
KPIPE_INSTANTIATE(float)
KPIPE_INSTANTIATE(double)
KPIPE_INSTANTIATE(bf16)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe
