// Learning-rate schedule (formulas in schedule.h; the parity test implements the same ones).
#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace zt {

double lr_at(const RunSpec::Optim& o, int64_t step, int64_t max_steps) {
  if (step < o.warmup_steps) return o.lr * double(step + 1) / double(o.warmup_steps);
  if (o.schedule == LrSchedule::Constant) return o.lr;
  const double span = double(std::max<int64_t>(1, max_steps - o.warmup_steps));
  const double r = std::clamp(double(step - o.warmup_steps) / span, 0.0, 1.0);
  if (o.schedule == LrSchedule::Linear) return o.lr - r * (o.lr - o.min_lr);
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * r)) * (o.lr - o.min_lr);
}

}  // namespace zt
