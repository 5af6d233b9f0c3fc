// Softmax cross-entropy fused with its gradient: one pass over each logits row for the max, one
// for the sum, one to write the gradient in place of the logits. Columns [Vr, V) of a row are
// padding: skipped by the max and the sum, their gradient written 0.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/vec_math.h"

namespace zt::cpu {

template <typename F>
void softmax_crossentropy(F* losses, F* logits, const int32_t* targets, int N, int V, int Vr,
                          F grad_scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    F* row = logits + int64_t(n) * V;
    F mx = -std::numeric_limits<F>::infinity();
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < Vr; ++i) mx = std::max(mx, row[i]);
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < Vr; ++i) sum += vexp(row[i] - mx);
    const F lse = mx + std::log(sum);
    const int tgt = targets[n];
    if (tgt < 0) {  // no loss on this token
      losses[n] = 0;
      if (grad_scale != F(0)) std::fill(row, row + V, F(0));
      continue;
    }
    losses[n] = lse - row[tgt];
    if (grad_scale != F(0)) {
#pragma omp simd
      for (int i = 0; i < Vr; ++i) row[i] = vexp(row[i] - lse) * grad_scale;
      std::fill(row + Vr, row + V, F(0));
      row[tgt] -= grad_scale;
    }
  }
}

template <typename F>
void logits_row_max(F* out_max, const F* logits, int N, int V, int Vr) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* row = logits + int64_t(n) * V;
    F mx = -std::numeric_limits<F>::infinity();
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < Vr; ++i) mx = std::max(mx, row[i]);
    out_max[n] = mx;
  }
}

template <typename F>
void logits_row_sumexp(F* out_sum, const F* logits, const F* row_max, int N, int V, int Vr) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* row = logits + int64_t(n) * V;
    const F mx = row_max[n];
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < Vr; ++i) sum += vexp(row[i] - mx);
    out_sum[n] = sum;
  }
}

template <typename F>
void logits_pick_target(F* out, const F* logits, const int32_t* targets, int N, int V, int v0) {
  for (int n = 0; n < N; ++n) {
    const int local = targets[n] - v0;
    out[n] = local >= 0 && local < V ? logits[int64_t(n) * V + local] : F(0);
  }
}

template <typename F>
void crossentropy_grad_from_lse(F* logits, const F* lse, const int32_t* targets, int N, int V, int Vr,
                                int v0, F grad_scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    F* row = logits + int64_t(n) * V;
    if (targets[n] < 0) {  // no loss on this token
      std::fill(row, row + V, F(0));
      continue;
    }
    const F l = lse[n];
#pragma omp simd
    for (int i = 0; i < Vr; ++i) row[i] = vexp(row[i] - l) * grad_scale;
    std::fill(row + Vr, row + V, F(0));
    const int local = targets[n] - v0;
    if (local >= 0 && local < V) row[local] -= grad_scale;
  }
}

template void logits_row_max<float>(float*, const float*, int, int, int);
template void logits_row_max<double>(double*, const double*, int, int, int);
template void logits_row_sumexp<float>(float*, const float*, const float*, int, int, int);
template void logits_row_sumexp<double>(double*, const double*, const double*, int, int, int);
template void logits_pick_target<float>(float*, const float*, const int32_t*, int, int, int);
template void logits_pick_target<double>(double*, const double*, const int32_t*, int, int, int);
template void crossentropy_grad_from_lse<float>(float*, const float*, const int32_t*, int, int, int, int, float);
template void crossentropy_grad_from_lse<double>(double*, const double*, const int32_t*, int, int, int, int, double);

template void softmax_crossentropy<float>(float*, float*, const int32_t*, int, int, int, float);
template void softmax_crossentropy<double>(double*, double*, const int32_t*, int, int, int, double);

}  // namespace zt::cpu
