// The deterministic embedding backward's sort (embedding.cu) as plain C++: the CUDA backend's
// scratch holds its keys, and the planner (engine/plan/plan_backend.cpp) counts the same bytes.
#pragma once

namespace zt::cuda {

// One 64-bit key (token id, position) per token row, padded to a power of two for the bitonic sort
constexpr long long embedding_sort_keys(long long rows) {
  long long n = 1;
  while (n < rows) n <<= 1;
  return n;
}
constexpr long long embedding_sort_scratch_floats(long long rows) { return 2 * embedding_sort_keys(rows); }

}  // namespace zt::cuda
