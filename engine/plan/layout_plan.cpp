// plan_layout (see layout_plan.h): the job and its step, as the trainer builds and runs them, on a PlanBackend.
#include "engine/plan/layout_plan.h"

#include <algorithm>
#include <cmath>

#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/core/status.h"
#include "engine/plan/planned_job.h"
#include "engine/observe/throughput.h"

namespace zt {

DeviceSpec device_spec(const std::string& name) {
  // bf16 dense tensor-core TFLOP/s, fp32 CUDA-core TFLOP/s, HBM bytes/s, memory (datasheets)
  if (name == "h100") return {"H100 SXM", 989, 67, 3.35e12, 80e9};
  if (name == "h200") return {"H200 SXM", 989, 67, 4.8e12, 141e9};
  if (name == "a100") return {"A100 SXM 80GB", 312, 19.5, 2.04e12, 80e9};
  if (name == "l4") return {"L4", 121, 30, 0.3e12, 24e9};
  user_error("--gpu {}: not one of h100, h200, a100, l4", name);
}

LayoutPlan plan_layout(const RunSpec& spec, int world, DeviceKind kind, const DeviceSpec* device) {
  LayoutPlan plan;
  plan.world = world;
  plan.tensor = int(spec.parallel.tensor);
  plan.zero_stage = int(spec.parallel.zero_stage);
  plan.micro_batch = int(spec.train.micro_batch);
  PlannedJob planned(spec, world, kind);
  plan.data = planned.topology().dp;
  PlanBackend& be = planned.backend();
  Job& job = planned.job();
  plan.compute = be.compute_dtype();
  std::unique_ptr<CheckpointWriter> ckpt;  // its pinned host buffers (async saves)
  if (!spec.checkpoint.dir.empty())
    ckpt = std::make_unique<CheckpointWriter>(spec.checkpoint, *job.store, *job.model, planned.topology(), be, 0,
                                              nullptr);
  be.reset_work();
  planned.step();
  {
    const ParamStore::TierBytes t = job.store->tier_bytes();
    plan.nvme_bytes = t.nvme[0] + t.nvme[1] + t.nvme[2];
  }
  plan.memory = be.memory_stats();
  plan.work = be.work();
  plan.model_flops = model_flops_per_token(spec.model) *
                     double(spec.train.global_batch) * double(spec.model.seq_len);
  if (device) plan.roofline_s = be.roofline_seconds(device->tflops, device->vector_tflops, device->bytes_per_s);
  return plan;
}

}  // namespace zt
