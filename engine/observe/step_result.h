// One optimizer step as the run reports it: its loss and where its time went.
#pragma once
#include <map>
#include <cstdint>
#include <string>

namespace zt {

struct StepResult {
  int64_t step = 0;  // 0-based optimizer step
  float loss = 0;    // mean over the global batch's tokens with loss
  // [data] packing: the global batch's tokens with loss and its documents (0 without packing,
  // where every position carries loss)
  int64_t loss_tokens = 0, documents = 0;
  double lr = 0, grad_norm = 0, step_ms = 0, tokens_per_s = 0;
  double data_wait_ms = 0;  // time this step waited for its batches
  // Where step_ms went (they add up to it): waiting for data, forward and backward compute,
  // the optimizer (clipping, AdamW, publishing the updated weights), exposed communication (time
  // blocked in collectives that nothing overlapped, taken out of the phases it happened in), the
  // checkpoint stall paid before this step, offload (time blocked in offload transfers and NVMe
  // I/O, taken out of the phases like communication), and the rest.
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, comm_ms = 0, checkpoint_ms = 0, offload_ms = 0,
         other_ms = 0;
  // comm_ms by group ("world", "tp", "dp"; with hybrid sharding "shard" and "replica"): which link
  // the step waited on
  std::map<std::string, double> comm_ms_by_group;
  double loss_scale = 1;    // fp16 loss scale this step used
  bool skipped = false;     // the update was not applied: fp16 overflow, or skip_reason
  std::string skip_reason;  // a non-finite loss or norm, a loss spike (engine/job/skip_policy.h)
  int64_t skipped_total = 0;
  bool early_update = false;  // the host AdamW ran while backward went on (offload, no clipping)
};

}  // namespace zt
