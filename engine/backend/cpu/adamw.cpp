// AdamW with decoupled weight decay, written in the same order of operations as
// torch.optim.AdamW (single-tensor path) so parity tests compare like with like.
#include <cmath>

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

template <typename F>
void adamw_update(F* params, const F* grads, F* m, F* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t) {
  const F bc1 = F(1) - std::pow(F(beta1), F(t));
  const F bc2 = F(1) - std::pow(F(beta2), F(t));
  const F step_size = F(lr) / bc1;
  const F bc2_sqrt = std::sqrt(bc2);
  const F decay = F(1) - F(lr) * F(weight_decay);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const F g = grads[i];
    params[i] *= decay;
    m[i] = m[i] * F(beta1) + g * (F(1) - F(beta1));  // torch: lerp(m, g, 1 - beta1)
    v[i] = v[i] * F(beta2) + g * g * (F(1) - F(beta2));
    const F denom = std::sqrt(v[i]) / bc2_sqrt + F(eps);
    params[i] -= step_size * m[i] / denom;
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, float, float, float, float, float, int);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, float, float, float, float, float, int);

}  // namespace zt::cpu
