// plan_layout (see layout_plan.h): the trainer's construction and step, on a PlanBackend.
#include "engine/plan/layout_plan.h"

#include <algorithm>
#include <cmath>

#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/comm/topology.h"
#include "engine/core/status.h"
#include "engine/model/registry.h"
#include "engine/optim/adamw.h"
#include "engine/optim/optimizer_step.h"
#include "engine/parallel/param_store.h"
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

LayoutPlan plan_layout(const RunSpec& spec_in, int world, DeviceKind kind, const DeviceSpec* device) {
  RunSpec spec = spec_in;
  const auto& p = spec.parallel;
  LayoutPlan plan;
  plan.world = world;
  plan.tensor = int(p.tensor);
  plan.zero_stage = int(p.zero_stage);
  plan.micro_batch = int(spec.train.micro_batch);
  if (world < 1 || world % plan.tensor != 0)
    user_error("[parallel] tensor = {} does not divide the world size {}", plan.tensor, world);
  plan.data = world / plan.tensor;
  const int64_t B = spec.train.micro_batch, T = spec.model.seq_len;
  if (spec.train.global_batch % (B * plan.data) != 0)
    user_error("[train] global_batch = {} is not a multiple of micro_batch * data-parallel degree = {} * {}",
               spec.train.global_batch, B, plan.data);
  plan.compute = compute_dtype_of(spec.precision.compute, kind);

  PlanBackend be(kind);
  be.set_compute_dtype(plan.compute);
  be.set_deterministic(spec.run.deterministic);  // the CUDA attention backward's scratch depends on it
  // the plan's backend answers as the one planned for: a model it cannot run is bad input here too
  if (const std::string op = unsupported_op(be, spec.model, plan.compute); !op.empty())
    user_error("the {} backend cannot run this model in {}: {}", kind == DeviceKind::CUDA ? "CUDA" : "CPU",
               dtype_name(plan.compute), op);
  Topology topo;
  topo.world_size = world, topo.tp = plan.tensor, topo.dp = plan.data;
  topo.world = group(world, "world", be);
  topo.tp_group = group(plan.tensor, "tp", be);
  topo.dp_group = group(plan.data, "dp", be);
  auto model = make_model(spec.model, be, int(B), topo.tp_group.get(), recompute_of(spec.train.recompute));
  ZeroPlacement placement(spec);
  placement.count_only = true;  // tiers in the books, no files
  ParamStore store(*model, be, topo, placement);  // not initialized: values do not matter here
  model->set_provider(&store);
  AdamW optimizer(spec.optim, store.optimizer_backend());
  std::unique_ptr<CheckpointWriter> ckpt;  // its pinned host buffers (async saves)
  if (!spec.checkpoint.dir.empty()) ckpt = std::make_unique<CheckpointWriter>(spec.checkpoint, store, *model, topo, be, 0, nullptr);

  // one step, as Trainer::step does it
  const int64_t local_batch = spec.train.global_batch / plan.data, accum = local_batch / B;
  std::vector<int32_t> ids(size_t(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % size_t(spec.model.vocab_size));
  be.reset_work();
  store.zero_grad();
  for (int64_t micro = 0; micro < accum; ++micro) {
    store.set_last_micro_batch(micro == accum - 1);
    model->forward_deferred(ids.data(), ids.data(), int(B), int(T), 1.0f);
    model->backward();
  }
  store.finish_backward();
  (void)model->take_losses();
  optimizer.clip_grad_norm(store.spans(), store.norm_group(), spec.optim.grad_clip, 1.0);
  adamw_step(store, optimizer, spec.optim.lr, 1);
  store.publish_params();
  {
    const ParamStore::TierBytes t = store.tier_bytes();
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
