// Token + position embedding, forward and backward.
#include <algorithm>

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

template <typename F>
void embedding_forward(F* out, const int32_t* inp, const F* wte, const F* wpe, int B, int T,
                       int C, const int32_t* pos) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
    const int t = pos ? pos[bt] : int(bt % T);
    F* o = out + bt * C;
    std::fill(o, o + C, F(0));
    if (inp[bt] >= 0) {
      const F* te = wte + int64_t(inp[bt]) * C;
      for (int c = 0; c < C; ++c) o[c] += te[c];
    }
    if (wpe) {
      const F* pe = wpe + int64_t(t) * C;
      for (int c = 0; c < C; ++c) o[c] += pe[c];
    }
  }
}

template <typename F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* inp, int B, int T, int C,
                        const int32_t* pos) {
  // Tokens repeat, so rows of dwte collide: threads own channel slices instead of rows, which
  // keeps the summation order fixed (b, t ascending) whatever the thread count.
  constexpr int kSlice = 32;
  const int n_slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < n_slices; ++s) {
    const int c0 = s * kSlice, c1 = std::min(C, c0 + kSlice);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const F* d = dout + (int64_t(b) * T + t) * C;
        const int32_t tok = inp[int64_t(b) * T + t];
        if (tok >= 0) {
          F* te = dwte + int64_t(tok) * C;
          for (int c = c0; c < c1; ++c) te[c] += d[c];
        }
        if (dwpe) {
          F* pe = dwpe + int64_t(pos ? pos[int64_t(b) * T + t] : t) * C;
          for (int c = c0; c < c1; ++c) pe[c] += d[c];
        }
      }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int, const int32_t*);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int,
                                        const int32_t*);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int, const int32_t*);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int, int,
                                         const int32_t*);

}  // namespace zt::cpu
