// Model's non-virtual helpers (see model.h).
#include "engine/model/model.h"

#include "engine/core/status.h"

namespace zt {

float Model::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale) {
  ZT_CHECK(deferred_losses() == 0, "forward() with {} deferred losses not taken", deferred_losses());
  forward_deferred(inputs, targets, B, T, grad_scale);
  return targets ? float(take_losses()) : 0.0f;
}

}  // namespace zt
