// Loss scaling (see loss_scaler.h).
#include "engine/optim/loss_scaler.h"

#include <algorithm>

#include "engine/core/status.h"

namespace zt {

LossScaler::LossScaler(const RunSpec::Precision& p, DType compute) {
  if (compute != DType::F16) return;
  active_ = true;
  dynamic_ = p.loss_scale == 0;
  scale_ = dynamic_ ? p.initial_scale : p.loss_scale;
  min_scale_ = p.min_scale;
  window_ = p.scale_window;
}

bool LossScaler::update(bool grads_finite) {
  if (!active_) return true;
  if (grads_finite) {
    if (dynamic_ && ++clean_ >= window_) {
      scale_ *= 2;
      clean_ = 0;
    }
    return true;
  }
  ++skipped_;
  clean_ = 0;
  // A fixed scale cannot adapt: an overflow there is what an overflow at min_scale is to dynamic
  // scaling (skipping would skip every later step alike and train nothing).
  if (!dynamic_)
    throw RuntimeFailure(fmt::format(
        "fp16 gradients overflow at the fixed loss scale {} ([precision] loss_scale): use a smaller "
        "scale, loss_scale = 0 (dynamic scaling), or [precision] compute = \"bf16\"", scale_));
  if (dynamic_) {
    if (scale_ <= min_scale_)
      throw RuntimeFailure(fmt::format(
          "fp16 gradients overflow even at the minimum loss scale {} ([precision] min_scale); the "
          "model's values exceed fp16's range: use [precision] compute = \"bf16\" or a lower lr",
          min_scale_));
    scale_ = std::max(scale_ / 2, min_scale_);
  }
  return false;
}

}  // namespace zt
