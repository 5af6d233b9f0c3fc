// Elementwise helpers: residual add, scaling, sum of squares.
#include <algorithm>
#include <vector>

#include <omp.h>

#include "engine/backend/cpu/ops.h"
#include "engine/core/philox.h"

namespace zt::cpu {

template <typename F>
void add(F* out, const F* a, const F* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename F>
void scale(F* x, F s, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

template <typename F>
void add_rows_scaled(F* y, int64_t ldy, const F* x, int64_t ldx, int64_t N, int C, F alpha) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    F* yr = y + n * ldy;
    const F* xr = x + n * ldx;
#pragma omp simd
    for (int c = 0; c < C; ++c) yr[c] += alpha * xr[c];
  }
}

template <typename F>
void dropout(F* out, const F* in, int64_t N, int C, int64_t ld, float p, uint64_t key, uint64_t row0, int64_t cols,
             int64_t col0) {
  const F scale = F(1) / (F(1) - F(p));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const uint64_t base = (row0 + uint64_t(n)) * uint64_t(cols) + uint64_t(col0);
    for (int c = 0; c < C; ++c)
      out[n * ld + c] = dropout_keeps(key, base + uint64_t(c), p) ? in[n * ld + c] * scale : F(0);
  }
}

template <typename F>
double sum_squares(const F* x, int64_t n) {
  // Fixed-size chunks summed in chunk order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(n_chunks);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n_chunks; ++c) {
    double acc = 0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
#pragma omp simd reduction(+ : acc)
    for (int64_t i = c * kChunk; i < end; ++i) acc += double(x[i]) * double(x[i]);
    partial[c] = acc;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

template void add<float>(float*, const float*, const float*, int64_t);
template void add<double>(double*, const double*, const double*, int64_t);
template void dropout<float>(float*, const float*, int64_t, int, int64_t, float, uint64_t, uint64_t, int64_t,
                             int64_t);
template void dropout<double>(double*, const double*, int64_t, int, int64_t, float, uint64_t, uint64_t, int64_t,
                              int64_t);
template void add_rows_scaled<float>(float*, int64_t, const float*, int64_t, int64_t, int, float);
template void add_rows_scaled<double>(double*, int64_t, const double*, int64_t, int64_t, int, double);
template void scale<float>(float*, float, int64_t);
template void scale<double>(double*, double, int64_t);
template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);

}  // namespace zt::cpu
