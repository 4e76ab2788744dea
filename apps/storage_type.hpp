#pragma once
// The one place a program turns train.precision into the type its activations and messages are stored in
// (the runtime's A in Trainer<float, A>, StageModel<float, A>): every program that runs a model dispatches here.
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/config.hpp"

namespace kpipe::apps {

// A storage type as a value, so that a generic lambda can name it: typename decltype(storage)::type.
template <class A> struct StorageType {
  using type = A;
};

// run(StorageType<bf16>{}) under train.precision = bf16, else run(StorageType<float>{}) (fp32, and tf32, whose
// products round differently but store float); returns what run returns.
template <class Run> decltype(auto) with_storage_type(Precision precision, Run&& run) {
  if (precision == Precision::bf16) return run(StorageType<bf16>{});
  return run(StorageType<float>{});
}

}  // namespace kpipe::apps
