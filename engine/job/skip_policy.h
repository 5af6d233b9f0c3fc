// Which steps are not applied: a non-finite loss or gradient norm (any precision: fp16's loss
// scaler handles its own overflows first), and with [train] spike_policy = "skip" a loss above
// spike_factor x the median of the last spike_window applied steps. Both inputs are global (the
// loss is reduced over the data-parallel group, the norm over every rank), so every rank decides
// alike without a collective. max_skipped_steps in a row end the run. With spike_policy =
// "rollback", rollback_after in a row make rollback_due(): the trainer goes back to a checkpoint
// (trainer.cpp, roll_back) and calls rolled_back().
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include "engine/config/spec.h"

namespace zt {

class SkipPolicy {
 public:
  explicit SkipPolicy(const RunSpec::Train& t) : t_(t) {}
  // Why step `step` (0-based) is skipped, or "" when it is applied (its loss then joins the
  // median's window). RuntimeFailure at the max_skipped_steps-th skip in a row.
  std::string judge(int64_t step, double loss, double grad_norm);
  int64_t skipped() const { return skipped_; }  // in this launch
  // The skips in a row since the last applied step call for a rollback (spike_policy "rollback").
  bool rollback_due() const { return t_.spike_policy == SpikePolicy::Rollback && in_a_row_ >= t_.rollback_after; }
  int64_t in_a_row() const { return in_a_row_; }
  // After a rollback: the count in a row starts again. RuntimeFailure past max_rollbacks.
  void rolled_back(int64_t step);

 private:
  const RunSpec::Train& t_;
  std::deque<double> window_;  // the last spike_window applied steps' losses
  int64_t skipped_ = 0, in_a_row_ = 0, rollbacks_ = 0;
};

}  // namespace zt
