// SwiGLU (Llama's MLP activation): out = silu(gate) * up, with gate and up side by side per row.
#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/vec_math.h"

namespace zt::cpu {

template <typename F>
void swiglu_forward(F* out, const F* inp, int64_t N, int F_) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const F* g = inp + n * 2 * F_;
    const F* u = g + F_;
    F* o = out + n * F_;
#pragma omp simd
    for (int i = 0; i < F_; ++i) o[i] = g[i] / (F(1) + vexp(-g[i])) * u[i];
  }
}

template <typename F>
void swiglu_backward(F* dinp, const F* inp, const F* dout, int64_t N, int F_) {
  // silu(g) = g sigma(g), silu'(g) = sigma(g) (1 + g (1 - sigma(g)))
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const F* g = inp + n * 2 * F_;
    const F* u = g + F_;
    const F* d = dout + n * F_;
    F* dg = dinp + n * 2 * F_;
    F* du = dg + F_;
#pragma omp simd
    for (int i = 0; i < F_; ++i) {
      const F sig = F(1) / (F(1) + vexp(-g[i]));
      const F di = d[i];
      dg[i] = di * u[i] * sig * (F(1) + g[i] * (F(1) - sig));
      du[i] = di * g[i] * sig;
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int64_t, int);
template void swiglu_forward<double>(double*, const double*, int64_t, int);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int);
template void swiglu_backward<double>(double*, const double*, const double*, int64_t, int);

}  // namespace zt::cpu
