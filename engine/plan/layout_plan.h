// `ztrain plan`: what a spec needs on each rank of a layout, found by building the real model,
// ZeRO states, optimizer and checkpoint buffers on a PlanBackend and running one real training
// step on it (rank 0 of the layout, every collective a no-op of the right group size). Memory by
// kind (the allocation tags) and tier (device, pinned host), the peak, and the step's FLOPs and
// bytes for a roofline estimate.
#pragma once
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/plan/plan_backend.h"

namespace zt {

struct LayoutPlan {
  int world = 1, tensor = 1, data = 1, zero_stage = 0, micro_batch = 1;
  DType compute = DType::F32;
  MemoryStats memory;       // of rank 0 after the step: peak, peak_by_tag, pinned_host
  size_t peak_device() const { return memory.peak; }
  PlanBackend::Work work;   // one optimizer step on rank 0
  double roofline_s = 0;    // that step on the device of `DeviceSpec`, 0 when none was given
  double model_flops = 0;   // the job's model FLOPs per step (6N + 12LCT per token)
  double nvme_bytes = 0;    // [offload] optimizer = "nvme": this rank's states on NVMe
};

// A device for the roofline: matrix (bf16 dense) and vector (fp32) TFLOP/s and memory bandwidth.
struct DeviceSpec {
  std::string name;
  double tflops = 0, vector_tflops = 0, bytes_per_s = 0;
  double memory_bytes = 0;
};
// "h100", "h200", "a100", "l4": the vendors' datasheet figures; UserError for another name.
DeviceSpec device_spec(const std::string& name);

// The plan of `spec` on `world` ranks for a `kind` backend (the spec's layout keys decide
// tensor, ZeRO stage and micro-batch). UserError when the layout is impossible.
LayoutPlan plan_layout(const RunSpec& spec, int world, DeviceKind kind, const DeviceSpec* device);

}  // namespace zt
