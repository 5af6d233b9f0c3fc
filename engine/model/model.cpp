// Model's non-virtual helpers (see model.h).
#include "engine/model/model.h"

#include "engine/core/status.h"

namespace zt {

float Model::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale,
                     const int32_t* positions) {
  ZT_CHECK(deferred_losses() == 0, "forward() with {} deferred losses not taken", deferred_losses());
  forward_deferred(inputs, targets, positions, B, T, grad_scale);
  if (!targets) return 0.0f;
  const int64_t counted = loss_tokens(targets, int64_t(B) * T);
  const double sum = take_losses();
  return counted ? float(sum / double(counted)) : 0.0f;
}

void Model::set_fp8(Fp8Layers) {
  throw UserError(fmt::format("[precision] fp8: {} has no FP8 linear layers", describe()));
}

int64_t loss_tokens(const int32_t* targets, int64_t n) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += targets[i] >= 0;
  return count;
}

}  // namespace zt
