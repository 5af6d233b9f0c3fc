// Learning-rate schedule: linear warmup, then cosine / linear decay to min_lr, or constant.
#pragma once
#include <cstdint>

#include "engine/config/spec.h"

namespace zt {

// lr for optimizer step `step` (0-based) of `max_steps`:
//   step < warmup:        lr * (step + 1) / warmup
//   then, with r = (step - warmup) / max(1, max_steps - warmup) in [0, 1]:
//   cosine:               min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr)
//   linear:               lr - r (lr - min_lr)
//   constant:             lr
double lr_at(const RunSpec::Optim& o, int64_t step, int64_t max_steps);

}  // namespace zt
