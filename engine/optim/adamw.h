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

namespace zt {

// A contiguous stretch of this rank's fp32 states (one ZeRO unit's shard; the whole unit at
// stage 0), all arrays of n elements in the backend's memory.
struct StateSpan {
  float* master;  // fp32 master weights
  float* grad;    // fp32 gradients (as reduced, times the loss scale)
  float *m, *v;   // AdamW moments
  void* compute;  // compute-precision copy of master that AdamW refreshes, or null (fp32)
  size_t n;
  // The tensors the span covers, in order, each [off, off + n) of the span.
  struct Piece {
    size_t off, n;
    bool decay;    // weight decay applies
    bool counted;  // counts in the global gradient norm on this rank (a tensor replicated across
                   // the tensor-parallel group is counted by one rank of it)
  };
  std::vector<Piece> pieces;
  bool all_counted = true;  // every piece counted: the norm takes the span at once
};

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
