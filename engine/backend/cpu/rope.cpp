// Rotary position embedding (Hugging Face convention: the two halves of each head; see ops.h).
#include <cmath>
#include <vector>

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

template <typename F>
void rope(F* x, int B, int T, int n_heads, int hs, int64_t stride, float theta, bool inverse, const int32_t* pos,
          const RopeScaling& scaling) {
  const int half = hs / 2;
  // cos and sin (T, half) of positions 0..T-1 (with positions, pos[b,t] <= t < T picks the row):
  // the frequency in fp32 as Hugging Face computes it (inv_freq = 1 / theta^(2i/hs), angle =
  // position * inv_freq), the trigonometry in double.
  std::vector<F> cs(size_t(T) * half), sn(size_t(T) * half);
  for (int i = 0; i < half; ++i) {
    const float inv_freq = rope_inv_freq(theta, i, hs, scaling);  // plain or Llama 3.1's rule
    for (int t = 0; t < T; ++t) {
      const float angle = float(t) * inv_freq;
      cs[size_t(t) * half + i] = F(std::cos(double(angle)));
      sn[size_t(t) * half + i] = F(inverse ? -std::sin(double(angle)) : std::sin(double(angle)));
    }
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int p = pos ? pos[int64_t(b) * T + t] : t;
      const F* c = cs.data() + size_t(p) * half;
      const F* s = sn.data() + size_t(p) * half;
      F* row = x + (int64_t(b) * T + t) * stride;
      for (int h = 0; h < n_heads; ++h) {
        F* lo = row + int64_t(h) * hs;
        F* hi = lo + half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const F a = lo[i], z = hi[i];
          lo[i] = a * c[i] - z * s[i];
          hi[i] = z * c[i] + a * s[i];
        }
      }
    }
}

template void rope<float>(float*, int, int, int, int, int64_t, float, bool, const int32_t*, const RopeScaling&);
template void rope<double>(double*, int, int, int, int, int64_t, float, bool, const int32_t*, const RopeScaling&);

}  // namespace zt::cpu
