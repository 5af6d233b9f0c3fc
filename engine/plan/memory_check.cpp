// check_memory_fits (see memory_check.h).
#include "engine/plan/memory_check.h"

#include <cstdint>

#include "engine/core/status.h"
#include "engine/model/registry.h"

namespace zt {

namespace {

double gib(double bytes) { return bytes / 1073741824.0; }

std::string planned_needs(const LayoutPlan& p) {
  const auto tag = [&](MemTag t) { return gib(double(p.memory.peak_by_tag[size_t(t)])); };
  return fmt::format("{:.3g} GiB per rank at its peak (the plan `ztrain plan` prints; peaks by kind: parameters "
                     "{:.3g}, gradients {:.3g}, optimizer {:.3g}, activations {:.3g}, communication buffers {:.3g}, "
                     "other {:.3g} GiB)",
                     gib(double(p.peak_device())), tag(MemTag::Params), tag(MemTag::Grads), tag(MemTag::OptimStates),
                     tag(MemTag::Activations), tag(MemTag::CommBuffers), tag(MemTag::Other));
}

[[noreturn]] void refuse(const RunSpec& spec, const MemoryBudget& b, double per_rank, const std::string& needs,
                         const std::string& hint) {
  user_error("{}: this spec needs at least {}{} but {} has {:.3g} GiB available ({:.0f} bytes needed, {} available): "
             "use a smaller model or micro_batch, more ranks with ZeRO or tensor parallelism, or offload{}",
             spec.source, needs, b.sharing > 1 ? fmt::format(" x {} ranks on this machine", b.sharing) : "", b.where,
             gib(double(b.device)), per_rank * b.sharing, b.device, hint);
}

// The first of [offload] optimizer = "cpu", then ZeRO-3 with optimizer and params offloaded,
// whose plan fits `per_rank` device bytes, as a sentence; "" if none does.
std::string offload_hint(const RunSpec& spec, int world, DeviceKind kind, double per_rank) {
  // adapters over a frozen base are not offloaded (the spec refuses it): no such hint
  if (spec.offload.params != OffloadTier::None || spec.lora.enabled()) return "";
  RunSpec s = spec;
  if (spec.offload.optimizer == OffloadTier::None) {
    s.offload.optimizer = OffloadTier::Cpu;
    const LayoutPlan p = plan_layout(s, world, kind, nullptr);
    if (double(p.peak_device()) <= per_rank)
      return fmt::format("; [offload] optimizer = \"cpu\" would need {:.3g} GiB of device memory per rank "
                         "({:.3g} GiB pinned host)", gib(double(p.peak_device())), gib(double(p.memory.pinned_host)));
  }
  s.parallel.zero_stage = 3;
  if (s.offload.optimizer == OffloadTier::None) s.offload.optimizer = OffloadTier::Cpu;
  s.offload.params = OffloadTier::Cpu;
  const LayoutPlan p = plan_layout(s, world, kind, nullptr);
  if (double(p.peak_device()) <= per_rank)
    return fmt::format("; [parallel] zero_stage = 3 with [offload] optimizer = \"{}\" and params = \"cpu\" would "
                       "need {:.3g} GiB of device memory per rank", choice_name(s.offload.optimizer), gib(double(p.peak_device())));
  return "";
}

}  // namespace

void check_footprint_fits(const RunSpec& spec, int world, DType compute, const MemoryBudget& b) {
  const double per_rank = b.device == SIZE_MAX ? 1e300 : double(b.device) / b.sharing;
  // Too large to plan: the footprint's bounds. ZeRO shards the gradient over at most the
  // data-parallel ranks, and every tier keeps that shard in device or pinned host memory.
  const int tp = int(spec.parallel.tensor), dp = world / tp;
  const ModelFootprint f = model_footprint(spec.model, int(spec.train.micro_batch), tp, dtype_size(compute),
                                           spec.train.recompute, spec.parallel.sequence_parallel);
  // a replica's ranks (a replica count that does not divide the ranks is refused by the plan itself)
  const int64_t replicas = spec.parallel.replicate;
  const double shards = double(replicas >= 1 && dp % replicas == 0 ? dp / replicas : dp);
  // with [lora] only the adapters have gradients (the frozen weights none)
  const double trained = spec.lora.enabled() ? model_family(spec.model.arch).lora_params(spec.model, spec.lora) / tp
                                             : f.params;
  const double grad_shard = trained / (spec.parallel.zero_stage == 0 ? 1.0 : shards) * 4;
  if (f.activation_bytes > per_rank || grad_shard > per_rank + b.pinned)
    refuse(spec, b, f.activation_bytes + grad_shard,
           fmt::format("{:.3g} GiB per rank (activations {:.3g} GiB, and a gradient shard of {:.3g} GiB in device or "
                       "pinned host memory)", gib(f.activation_bytes + grad_shard), gib(f.activation_bytes),
                       gib(grad_shard)),
           "");
}

LayoutPlan check_memory_fits(const RunSpec& spec_in, int world, DeviceKind kind, DType compute, const MemoryBudget& b,
                             const MachineProfile* machine) {
  RunSpec spec = spec_in;
  spec.precision.compute = precision_choice_of(compute);  // as the backend resolved it
  check_footprint_fits(spec, world, compute, b);
  const double per_rank = b.device == SIZE_MAX ? 1e300 : double(b.device) / b.sharing;
  LayoutPlan plan = plan_layout(spec, world, kind, machine);
  const double peak = double(plan.peak_device());
  if (b.device != SIZE_MAX && peak * b.sharing > double(b.device))
    refuse(spec, b, peak, planned_needs(plan), offload_hint(spec, world, kind, per_rank));
  return plan;
}

}  // namespace zt
