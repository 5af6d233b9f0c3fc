// AdamW + clipping over the parameter table.
#include "engine/optim/optimizer.h"

#include <cmath>

namespace zt {

AdamW::AdamW(const RunSpec::Optim& cfg, Backend& backend, size_t n) : cfg_(cfg), be_(backend) {
  m_ = static_cast<float*>(be_.alloc(n * sizeof(float)));
  v_ = static_cast<float*>(be_.alloc(n * sizeof(float)));
}

AdamW::~AdamW() {
  be_.free(m_);
  be_.free(v_);
}

double AdamW::grad_norm(const float* grads, size_t n) { return std::sqrt(be_.sum_squares(grads, n)); }

double AdamW::clip(float* grads, size_t n, double max_norm) {
  const double norm = grad_norm(grads, n);
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) be_.scale(grads, float(coef), int64_t(n));
  }
  return norm;
}

void AdamW::step(float* params, const float* grads, const std::vector<ParamInfo>& table, double lr,
                 int t) {
  for (const auto& p : table)
    be_.adamw_update(params + p.offset, grads + p.offset, m_ + p.offset, v_ + p.offset,
                     int64_t(p.numel), float(lr), float(cfg_.beta1), float(cfg_.beta2),
                     float(cfg_.eps), p.decay ? float(cfg_.weight_decay) : 0.0f, t);
}

}  // namespace zt
