// GELU, tanh approximation (as GPT-2 and nn.GELU(approximate="tanh")).
#include <cmath>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/vec_math.h"

namespace zt::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
}

template <typename F>
void gelu_forward(F* out, const F* inp, int64_t n) {
  const F k = F(kSqrt2OverPi);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const F x = inp[i];
    out[i] = F(0.5) * x * (F(1) + vtanh(k * (x + F(0.044715) * x * x * x)));
  }
}

template <typename F>
void gelu_backward(F* dinp, const F* inp, const F* dout, int64_t n) {
  const F k = F(kSqrt2OverPi);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const F x = inp[i];
    const F u = k * (x + F(0.044715) * x * x * x);
    const F th = vtanh(u);
    const F sech2 = F(1) - th * th;
    const F grad = F(0.5) * (F(1) + th) + F(0.5) * x * sech2 * k * (F(1) + F(3 * 0.044715) * x * x);
    dinp[i] = grad * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace zt::cpu
