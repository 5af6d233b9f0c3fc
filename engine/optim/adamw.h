// The optimizer over this rank's shard of the model states: global-norm gradient clipping and
// AdamW (decoupled weight decay), run by the backend that holds the states. It sees only spans of
// state arrays and the tensors they cover; where the states live and how they are sharded is the
// state placement's business (engine/parallel/param_store.h).
#pragma once
#include <cstddef>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/spec.h"
#include "engine/parallel/state_span.h"

namespace zt {

class AdamW {
 public:
  AdamW(const RunSpec::Optim& o, Backend& be);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Global L2 norm of the true gradients (the stored ones divided by loss_scale) before clipping
  // (torch's rule): squares summed on the device over the counted pieces, read once, summed over
  // `norm_group` (the ranks whose spans partition the model). Unscales and clips the gradients in
  // one pass. A non-finite norm (fp16 overflow) leaves them as they are and is returned for the
  // caller to skip the step.
  double clip_grad_norm(const std::vector<StateSpan>& spans, Comm& norm_group, double max_norm, double loss_scale);
  // One AdamW update (step t >= 1) of every piece; writes the compute copy in the same pass.
  void step(const std::vector<StateSpan>& spans, double lr, int t);

 private:
  RunSpec::Optim o_;
  Backend& be_;
  double* norm_acc_;  // (1) device: the squared gradient norm being summed
};

}  // namespace zt
