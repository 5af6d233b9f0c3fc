// The memory a run needs on each rank, computed from the spec and the process layout before
// anything is allocated, so that a spec that cannot fit fails at once with the numbers (exit 2)
// instead of after minutes of allocation or at the kernel's OOM killer.
//
// Counted: the model states of engine/parallel/param_store.cpp (fp32 master weights, gradients,
// AdamW moments, the compute-precision copy) as ZeRO shards them, and the model's activation
// buffer. Not counted, so the figure is a lower bound: ZeRO-3's gathered layers, gradient buckets,
// communication buffers, the tensor-parallel and token scratch (each at most a layer or a batch).
#pragma once
#include <cstddef>
#include <string>

#include "engine/config/spec.h"

namespace zt {

struct MemoryPlan {
  double params = 0, grads = 0, optimizer = 0, activations = 0;  // device bytes on one rank
  // [offload]: bytes in pinned host memory (the offloaded states, and the NVMe tier's block
  // buffers) and on NVMe (the files under nvme_path)
  double pinned_host = 0, nvme = 0;
  double total() const { return params + grads + optimizer + activations; }
};

// One rank of a tensor-parallel group of `tp`, with `dp` data-parallel ranks; `compute_size`:
// bytes per element of the compute dtype (4 for fp32).
MemoryPlan plan_memory(const RunSpec& spec, int tp, int dp, size_t compute_size);

// UserError (exit 2) when `ranks_sharing` ranks of `plan` need more than `available` bytes (the
// ranks on one machine share host memory on the CPU backend; a GPU has one rank).
// `hint`: what would fit instead (offload_hint), appended to the message.
void check_memory_fits(const MemoryPlan& plan, size_t available, int ranks_sharing, const std::string& where,
                       const std::string& source, const std::string& hint = "");

// For a spec that does not fit `available` bytes per rank: the first of [offload] optimizer =
// "cpu", then ZeRO-3 with optimizer and params offloaded, that would, with its figure; "" if none.
std::string offload_hint(const RunSpec& spec, int tp, int dp, size_t compute_size, double available);

}  // namespace zt
