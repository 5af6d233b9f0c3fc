// What the ZeRO store (engine/parallel/param_store.h) and its state tiers (engine/offload) are
// configured from: the ZeRO stage and where each kind of model state lives, the run spec's
// [parallel] and [offload] parsed once here into typed values (neither reads the spec itself).
#pragma once
#include <string>

#include "engine/config/spec.h"

namespace zt {

struct ZeroPlacement {
  enum class Tier { Device, Pinned, Nvme };
  int stage = 0;            // ZeRO stage 0-3 over the data-parallel group
  int prefetch = 2;         // ZeRO-3 groups gathered ahead of use
  double bucket_mb = 25;    // the largest unit of a group, in MiB of fp32
  Tier optimizer = Tier::Device;  // masters, moments and the optimizer's gradient
  Tier params = Tier::Device;     // ZeRO-3's compute-precision parameter shards
  std::string nvme_path;    // the NVMe tier's directory
  double buffer_mb = 16;    // NVMe: MiB per I/O request
  int io_depth = 4;         // NVMe: requests in flight
  int host_threads = 0;     // the host optimizer's threads (0 = all cores)
  bool fp8_all_gather = true;  // stage 3: the FP8 layers' weights travel as FP8 bytes ([precision])
  // The planner's store (engine/plan/layout_plan.cpp): the tiers count their memory and work in
  // the backend's books and create no files (engine/offload/state_tier.h).
  bool count_only = false;

  ZeroPlacement() = default;
  // The run spec's placement (implicit: a RunSpec configures a store as it is).
  ZeroPlacement(const RunSpec& spec)  // NOLINT(google-explicit-constructor)
      : stage(int(spec.parallel.zero_stage)),
        prefetch(int(spec.parallel.prefetch)),
        bucket_mb(spec.parallel.bucket_mb),
        optimizer(tier(spec.offload.optimizer)),
        params(tier(spec.offload.params)),
        nvme_path(spec.offload.nvme_path),
        buffer_mb(spec.offload.buffer_mb),
        io_depth(int(spec.offload.io_depth)),
        host_threads(int(spec.run.threads)),
        fp8_all_gather(spec.precision.fp8_all_gather) {}

  bool offloads_optimizer() const { return optimizer != Tier::Device; }
  bool offloads_params() const { return params != Tier::Device; }
  // ZeRO-3's compute shards live off the device (parameter offload rides on the optimizer's tier)
  bool offloads_compute_shards() const { return offloads_optimizer() && offloads_params(); }

 private:
  static Tier tier(OffloadTier t) { return t == OffloadTier::Nvme ? Tier::Nvme : t == OffloadTier::Cpu ? Tier::Pinned : Tier::Device; }
};

}  // namespace zt
