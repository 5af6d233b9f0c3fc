// Loss scaling for fp16 compute (Micikevicius et al., "Mixed Precision Training"; the policy of
// torch.cuda.amp.GradScaler and DeepSpeed's dynamic scaler): the loss gradient is multiplied by
// `scale` so small gradients survive fp16's range; the fp32 gradients are divided by it again
// before clipping. Dynamic: a step whose gradients overflow (inf/NaN) is skipped and the scale
// halved; after `scale_window` clean steps in a row it doubles. A fixed scale never changes, so
// an overflow at it stops the run. bf16 and fp32 keep scale 1 and
// never skip (bf16 has fp32's exponent range).
#pragma once
#include <cstdint>

#include "engine/config/spec.h"
#include "engine/core/dtype.h"

namespace zt {

class LossScaler {
 public:
  LossScaler(const RunSpec::Precision& p, DType compute);
  double scale() const { return scale_; }
  bool active() const { return active_; }  // fp16: scaling and skipping apply
  // Takes the outcome of a step's gradients; true when the optimizer may apply them. Throws
  // RuntimeFailure when dynamic scaling overflows at min_scale or a fixed scale overflows at all
  // (fp16 cannot represent this run at that scale).
  bool update(bool grads_finite);
  int64_t skipped() const { return skipped_; }
  // What a checkpoint saves, so that a resumed run skips and rescales exactly as it would have.
  struct State {
    double scale = 1;
    int64_t clean = 0, skipped = 0;
  };
  State state() const { return {scale_, clean_, skipped_}; }
  void restore(const State& s) { scale_ = s.scale, clean_ = s.clean, skipped_ = s.skipped; }

 private:
  bool active_ = false, dynamic_ = false;
  double scale_ = 1, min_scale_ = 1;
  int64_t window_ = 1000, clean_ = 0, skipped_ = 0;
};

}  // namespace zt
