// The start-up memory check: a spec that cannot fit fails at once with the numbers (exit 2)
// instead of after minutes of allocation or at the kernel's OOM killer. Its figure is the plan
// `ztrain plan` computes (engine/plan/layout_plan.h: the real model, ZeRO states, tiers,
// checkpoint buffers and one step on a counting backend), so there is one memory model.
//
// A spec so large that building even its plan would not fit is refused from the model family's
// footprint first: its activations, and this rank's fp32 gradient shard (which every placement
// keeps in device or pinned host memory), beyond the memory there is.
#pragma once
#include <cstddef>
#include <string>

#include "engine/config/spec.h"
#include "engine/plan/layout_plan.h"

namespace zt {

struct MemoryBudget {
  size_t device = SIZE_MAX;  // bytes the backend may hold for this rank's ranks (SIZE_MAX: unknown)
  int sharing = 1;           // ranks sharing `device` (the CPU backend's ranks on one machine)
  double pinned = 0;         // this rank's pinned host pool (engine/offload/pinned_pool.h)
  std::string where;         // "[run] device_memory_limit", "this machine", "the GPU"
};

// The plan of this spec on `world` ranks of a `kind` backend computing in `compute`; UserError
// naming the bytes needed and available (and the offload setting that would fit) when its peak
// does not fit `budget`. The caller checks the plan's pinned and NVMe bytes against the pool and
// nvme_path. With `machine`, the plan's step is also priced on it (step_time.h).
// The footprint guard alone, which check_memory_fits runs first: UserError when the activations
// or this rank's gradient shard alone exceed `budget` (`ztrain plan` runs it before building a
// plan that could not fit: an absurd shape is refused at once, not after filling the host).
void check_footprint_fits(const RunSpec& spec, int world, DType compute, const MemoryBudget& budget);
LayoutPlan check_memory_fits(const RunSpec& spec, int world, DeviceKind kind, DType compute, const MemoryBudget& budget,
                             const MachineProfile* machine = nullptr);

}  // namespace zt
