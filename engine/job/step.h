// One optimizer step, the one copy of its protocol: zero the gradients, schedule the early host
// AdamW where it applies, forward and backward over this rank's micro-batches (gradient
// accumulation), the last gradient reductions, the loss and the non-finite outcome agreed by every
// rank, the loss scaler and the skip policy, clipping, AdamW and the publication of the updated
// weights. The trainer, the planner (on its counting backend) and the tests run it; what watches
// the step (timing, traces, the failure tests' faults) attaches through StepHook.
#pragma once
#include <cstdint>
#include <functional>

#include "engine/job/job.h"
#include "engine/observe/step_hooks.h"
#include "engine/observe/step_result.h"

namespace zt {

// A micro-batch on the host: (micro_batch, seq_len) each.
struct MicroBatch {
  int32_t* inputs;
  int32_t* targets;    // -1: no loss at that position
  int32_t* positions;  // each token's position in its document; a source whose rows are one document each sets it null
  int64_t documents = 0;  // documents in it ([data] packing; 0 otherwise)
};
// Fills micro-batch `micro` (0-based within the step) of this rank.
using MicroBatchSource = std::function<void(int64_t micro, MicroBatch& batch)>;

// Step `step` (0-based; it sets the learning rate) over job.micro_batches micro-batches from
// `next`. Every rank calls it; every rank returns the same loss, norm and decision.
// RuntimeFailure when a step must be skipped that the early host AdamW has applied already.
StepResult train_step(Job& job, int64_t step, const MicroBatchSource& next, StepHook& hooks);

}  // namespace zt
