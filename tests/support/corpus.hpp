#pragma once
// The synthetic corpus the tests train on (seed 3, 60k tokens, 10% noise), made once per process. Learnable
// enough for the learning runs; the bit-identity tests only need the same tokens on every rank.
#include "kpipe/data/synthetic.hpp"

namespace kpipe::test {

inline const data::Corpus& corpus() {
  static const data::Corpus c = data::synthetic_corpus(3, 60000, 0.1);
  return c;
}

}  // namespace kpipe::test
