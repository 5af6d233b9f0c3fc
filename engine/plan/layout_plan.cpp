// plan_layout (see layout_plan.h): the job and its step, as the trainer builds and runs them, on a PlanBackend.
#include "engine/plan/layout_plan.h"

#include <algorithm>
#include <cmath>

#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/comm/topology.h"
#include "engine/core/status.h"
#include "engine/model/registry.h"
#include "engine/job/job.h"
#include "engine/job/step.h"
#include "engine/observe/throughput.h"

namespace zt {

namespace {

// A group of `size` ranks seen from rank 0, whose collectives move nothing: the plan needs the
// group's shape (shard sizes, buffers), not its data.
class ShapeOnlyComm final : public Comm {
 public:
  ShapeOnlyComm(int size, std::string name) : size_(size), name_(std::move(name)) {}
  int size() const override { return size_; }
  int rank() const override { return 0; }
  std::string name() const override { return name_ + "(plan)"; }
  Handle all_reduce(float*, size_t, ReduceOp) override { return 0; }
  Handle reduce_scatter(const float*, float*, size_t) override { return 0; }
  Handle all_gather(const float*, float*, size_t) override { return 0; }
  Handle broadcast(float*, size_t, int) override { return 0; }
  void wait(Handle) override {}
  void all_reduce_doubles(double*, size_t) override {}
  void barrier() override {}

 private:
  int size_;
  std::string name_;
};

// The counting backend computes no values (its reads give zeros, the loss's logarithm -inf): the
// step's loss is taken as 0, so that the step is applied as a training step is.
struct CountedValues final : StepHook {
  void loss_reduced(int64_t, double& loss) override { loss = 0; }
};

std::unique_ptr<Comm> group(int size, const char* name, Backend& be) {
  if (size == 1) return make_device_self_comm(name, be);
  return std::make_unique<ShapeOnlyComm>(size, name);
}

}  // namespace

DeviceSpec device_spec(const std::string& name) {
  // bf16 dense tensor-core TFLOP/s, fp32 CUDA-core TFLOP/s, HBM bytes/s, memory (datasheets)
  if (name == "h100") return {"H100 SXM", 989, 67, 3.35e12, 80e9};
  if (name == "h200") return {"H200 SXM", 989, 67, 4.8e12, 141e9};
  if (name == "a100") return {"A100 SXM 80GB", 312, 19.5, 2.04e12, 80e9};
  if (name == "l4") return {"L4", 121, 30, 0.3e12, 24e9};
  user_error("--gpu {}: not one of h100, h200, a100, l4", name);
}

LayoutPlan plan_layout(const RunSpec& spec, int world, DeviceKind kind, const DeviceSpec* device) {
  const auto& p = spec.parallel;
  LayoutPlan plan;
  plan.world = world;
  plan.tensor = int(p.tensor);
  plan.zero_stage = int(p.zero_stage);
  plan.micro_batch = int(spec.train.micro_batch);
  if (world < 1 || world % plan.tensor != 0)
    user_error("[parallel] tensor = {} does not divide the world size {}", plan.tensor, world);
  plan.data = world / plan.tensor;
  Topology topo;
  topo.world_size = world, topo.tp = plan.tensor, topo.dp = plan.data;
  (void)micro_batches_per_step(spec, topo);  // before anything is built
  PlanBackend be(kind);
  topo.world = group(world, "world", be);
  topo.tp_group = group(plan.tensor, "tp", be);
  topo.dp_group = group(plan.data, "dp", be);
  ZeroPlacement placement(spec);
  placement.count_only = true;  // tiers in the books, no files
  Job job(spec, topo, be, placement);  // not initialized: values do not matter here
  plan.compute = be.compute_dtype();
  std::unique_ptr<CheckpointWriter> ckpt;  // its pinned host buffers (async saves)
  if (!spec.checkpoint.dir.empty())
    ckpt = std::make_unique<CheckpointWriter>(spec.checkpoint, *job.store, *job.model, topo, be, 0, nullptr);

  // one step, the trainer's (engine/job/step.h), on token ids that cover the vocabulary
  const int64_t T = spec.model.seq_len;
  be.reset_work();
  CountedValues values;
  const StepResult r = train_step(job, 0, [&](int64_t, int32_t* in, int32_t* tgt) {
    for (size_t i = 0; i < job.inputs.size(); ++i) in[i] = tgt[i] = int32_t(i % size_t(spec.model.vocab_size));
  }, values);
  ZT_CHECK(!r.skipped, "the plan's step skipped its update ({}): the optimizer's memory would be missing",
           r.skip_reason);
  {
    const ParamStore::TierBytes t = job.store->tier_bytes();
    plan.nvme_bytes = t.nvme[0] + t.nvme[1] + t.nvme[2];
  }
  plan.memory = be.memory_stats();
  plan.work = be.work();
  plan.model_flops = flops_per_token(spec.model, model_family(spec.model.arch).matmul_params(spec.model)) *
                     double(spec.train.global_batch) * double(T);
  if (device) plan.roofline_s = be.roofline_seconds(device->tflops, device->vector_tflops, device->bytes_per_s);
  return plan;
}

}  // namespace zt
