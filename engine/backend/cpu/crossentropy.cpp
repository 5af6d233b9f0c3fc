// Softmax cross-entropy fused with its gradient: one pass over each logits row for the max, one
// for the sum, one to write the gradient in place of the logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/vec_math.h"

namespace zt::cpu {

template <typename F>
void softmax_crossentropy(F* losses, F* logits, const int32_t* targets, int N, int V,
                          F grad_scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    F* row = logits + int64_t(n) * V;
    F mx = -std::numeric_limits<F>::infinity();
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < V; ++i) mx = std::max(mx, row[i]);
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; ++i) sum += vexp(row[i] - mx);
    const F lse = mx + std::log(sum);
    const int tgt = targets[n];
    losses[n] = lse - row[tgt];
    if (grad_scale != F(0)) {
#pragma omp simd
      for (int i = 0; i < V; ++i) row[i] = vexp(row[i] - lse) * grad_scale;
      row[tgt] -= grad_scale;
    }
  }
}

template void softmax_crossentropy<float>(float*, float*, const int32_t*, int, int, float);
template void softmax_crossentropy<double>(double*, double*, const int32_t*, int, int, double);

}  // namespace zt::cpu
