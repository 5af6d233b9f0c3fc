// plan_layout (see layout_plan.h): the job and its step, as the trainer builds and runs them, on a PlanBackend.
#include "engine/plan/layout_plan.h"

#include <algorithm>
#include <cmath>

#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/core/status.h"
#include "engine/plan/planned_job.h"
#include "engine/observe/throughput.h"

namespace zt {

LayoutPlan plan_layout(const RunSpec& spec, int world, DeviceKind kind, const MachineProfile* machine,
                       const Calibration* cal) {
  if (spec.precision.fp8 != Fp8Recipe::None && machine && kind == DeviceKind::CUDA && machine->gpu.fp8_tflops <= 0)
    user_error("{}: [precision] fp8 = \"{}\" needs FP8 tensor cores (compute capability 8.9 or newer); the {} has "
               "none (its profile's [gpu] fp8_tflops is 0)", spec.source, choice_name(spec.precision.fp8),
               machine->gpu.name);
  LayoutPlan plan;
  plan.world = world;
  plan.tensor = int(spec.parallel.tensor);
  plan.zero_stage = int(spec.parallel.zero_stage);
  plan.replicate = int(spec.parallel.replicate);
  plan.sequence_parallel = spec.parallel.sequence_parallel && spec.parallel.tensor > 1;
  plan.micro_batch = int(spec.train.micro_batch);
  PlannedJob planned(spec, world, kind);
  plan.data = planned.topology().dp;
  PlanBackend& be = planned.backend();
  Job& job = planned.job();
  plan.compute = be.compute_dtype();
  std::unique_ptr<CheckpointWriter> ckpt;  // its pinned host buffers (async saves)
  if (!spec.checkpoint.dir.empty())
    ckpt = std::make_unique<CheckpointWriter>(spec.checkpoint, *job.store, job.trained_table(), planned.topology(), be, 0,
                                              nullptr);
  be.reset_work();
  planned.step();
  {
    const ParamStore::TierBytes t = job.store->tier_bytes();
    plan.nvme_bytes = t.nvme[0] + t.nvme[1] + t.nvme[2];
  }
  plan.memory = be.memory_stats();
  plan.work = be.work();
  plan.tokens = double(spec.train.global_batch) * double(spec.model.seq_len);
  plan.model_flops = model_flops_per_token(spec.model, spec.lora) * plan.tokens;
  if (machine) {
    // matrix products at the compute precision's peak: bf16/fp16 tensor cores, fp32 the vector peak
    // (the peak MFU is judged against, as the training log's)
    MachineProfile m = *machine;
    if (plan.compute == DType::F32) m.gpu.tflops = m.gpu.vector_tflops;
    const DeviceSpec& gpu = m.gpu;
    plan.roofline_s = be.roofline_seconds(gpu.tflops, gpu.vector_tflops, gpu.bytes_per_s, gpu.fp8_tflops);
    // NCCL's streams progress on their own; MPI on host buffers (the CPU backend, or [comm]
    // backend = "mpi" staging a GPU's buffers) moves data only inside the waits
    const bool async = kind == DeviceKind::CUDA && spec.comm.backend != CommBackendChoice::Mpi;
    plan.time = price_step(be.ops(), be.collectives(), m,
                           cal ? *cal : machine->calibration ? *machine->calibration : default_calibration(), async);
    if (plan.time.step_s > 0) plan.mfu = plan.model_flops / world / plan.time.step_s / (gpu.tflops * 1e12);
  }
  return plan;
}

std::string LayoutPlan::layout() const {
  return fmt::format("tensor {} x data {}, ZeRO-{}{}{}", tensor, data, zero_stage,
                     replicate > 1 ? fmt::format(" in {} replicas", replicate) : "",
                     sequence_parallel ? ", sequence-parallel" : "");
}

}  // namespace zt
