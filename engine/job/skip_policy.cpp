// Skipped steps (see skip_policy.h).
#include "engine/job/skip_policy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/status.h"

namespace zt {

std::string SkipPolicy::judge(int64_t step, double loss, double grad_norm) {
  std::string why;
  if (!std::isfinite(loss)) why = fmt::format("the loss is {}", loss);
  else if (!std::isfinite(grad_norm)) why = fmt::format("the gradient norm is {}", grad_norm);
  else if (t_.spike_policy != SpikePolicy::Off && window_.size() >= std::min<size_t>(size_t(t_.spike_window), 8)) {
    std::vector<double> v(window_.begin(), window_.end());
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    const double median = v[v.size() / 2];
    if (loss > t_.spike_factor * median)
      why = fmt::format("loss spike: {:.4g} is above {:g} x the median {:.4g} of the last {} steps", loss,
                        t_.spike_factor, median, window_.size());
  }
  if (why.empty()) {
    in_a_row_ = 0;
    window_.push_back(loss);
    while (window_.size() > size_t(t_.spike_window)) window_.pop_front();
    return why;
  }
  ++skipped_;
  if (++in_a_row_ >= t_.max_skipped_steps)
    throw RuntimeFailure(fmt::format("step {}: {}: {} skipped steps in a row ([train] max_skipped_steps = {}): "
                                     "training has diverged; lower [optim] lr, or resume an earlier checkpoint",
                                     step + 1, why, in_a_row_, t_.max_skipped_steps));
  return why;
}

void SkipPolicy::rolled_back(int64_t step) {
  in_a_row_ = 0;
  if (++rollbacks_ > t_.max_rollbacks)
    throw RuntimeFailure(fmt::format("step {}: rollback {} of this launch, past [train] max_rollbacks = {}: "
                                     "training keeps diverging; lower [optim] lr, or look at the skipped samples in "
                                     "metrics.jsonl", step + 1, rollbacks_, t_.max_rollbacks));
}

}  // namespace zt
