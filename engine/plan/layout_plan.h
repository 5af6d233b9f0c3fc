// `ztrain plan`: what a spec needs on each rank of a layout, found by building the real model,
// ZeRO states, optimizer and checkpoint buffers on a PlanBackend and running one real training
// step on it (rank 0 of the layout, every collective a no-op of the right group size). Memory by
// kind (the allocation tags) and tier (device, pinned host), the peak, and on a machine profile
// the step's predicted time with its communication (step_time.h).
#pragma once
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/plan/machine.h"
#include "engine/plan/plan_backend.h"
#include "engine/plan/step_time.h"

namespace zt {

struct LayoutPlan {
  int world = 1, tensor = 1, data = 1, zero_stage = 0, micro_batch = 1;
  int replicate = 1;  // hybrid sharding: ZeRO within each of this many replicas of the data-parallel ranks
  bool sequence_parallel = false;  // Megatron sequence parallelism over the tensor group (tensor >= 2)
  // "tensor 2 x data 4, ZeRO-3" (" in 2 replicas" with hybrid sharding, ", sequence-parallel")
  std::string layout() const;
  DType compute = DType::F32;
  MemoryStats memory;       // of rank 0 after the step: peak, peak_by_tag, pinned_host
  size_t peak_device() const { return memory.peak; }
  PlanBackend::Work work;   // one optimizer step on rank 0
  double model_flops = 0;   // the job's model FLOPs per step (observe/throughput.h, all ranks)
  double tokens = 0;        // the step's tokens (global batch x seq_len)
  double nvme_bytes = 0;    // [offload] optimizer = "nvme": this rank's states on NVMe
  // On a machine profile (0 / empty without one):
  double roofline_s = 0;    // every op at the datasheet peaks, no communication: a lower bound
  StepTime time;            // the predicted step: calibrated ops, collectives on their links
  double mfu = 0;           // model FLOPs per GPU over time.step_s, against the GPU's bf16 peak
  double tokens_per_s_per_gpu() const { return time.step_s > 0 ? tokens / time.step_s / world : 0; }
};

// The plan of `spec` on `world` ranks for a `kind` backend (the spec's layout keys decide
// tensor, ZeRO stage and micro-batch), its step priced on `machine` when given (`cal`: the
// efficiencies; null: the machine's own, else default_calibration()). UserError when the layout is
// impossible.
LayoutPlan plan_layout(const RunSpec& spec, int world, DeviceKind kind, const MachineProfile* machine,
                       const Calibration* cal = nullptr);

}  // namespace zt
