// Which global samples a rank's micro-batch holds: header-only, so that the training step (which
// draws random masks by global position) and the loader (which reads the samples) share it without
// the step linking the data library.
#pragma once
#include <cstdint>

namespace zt::data {

// The first global sample of micro-batch k (counted from step 0) of data-parallel rank `rank` of
// `dp`: micro-batches of B sequences, `global_batch` sequences per step split evenly over ranks.
// Whatever dp, the union over ranks of a step's micro-batches is that step's slice
// [step * global_batch, (step + 1) * global_batch) of the global order.
inline uint64_t micro_batch_first_sample(uint64_t k, int64_t global_batch, int dp, int rank, int B) {
  const int64_t local = global_batch / dp, accum = local / B;
  return uint64_t(int64_t(k) / accum * global_batch + rank * local + int64_t(k) % accum * B);
}

}  // namespace zt::data
