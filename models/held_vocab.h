// The vocabulary as the models hold it, shared by the family entries.
#pragma once
#include <cstdint>

#include "engine/config/spec.h"

namespace zt {

// vocab_size padded to a multiple of vocab_multiple x T (Megatron-LM's
// make-vocab-size-divisible-by), so that each tensor-parallel rank holds an equal slice.
inline int64_t held_vocab(const RunSpec::Model& m, int tp) {
  const int64_t k = m.vocab_multiple * tp;
  return (m.vocab_size + k - 1) / k * k;
}

}  // namespace zt
